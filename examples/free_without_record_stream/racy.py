"""Scenario 21, racy: a tensor read on a side stream is freed without record_stream.

The caching allocator only knows the stream the block was allocated on; once `t1` is freed, the block can be
handed to the next allocation on the default stream while the side stream may still be reading it. streamcheck
reports it there, at the default stream's next work, with the free as a related location.
"""

import torch


def main() -> None:
    side = torch.cuda.Stream()
    t1 = torch.ones(1 << 20, device="cuda")
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        total = t1.sum()  # streamcheck: earlier
    del t1  # streamcheck: race (freed while the side stream may still read it)
    reused = torch.zeros(1 << 20, device="cuda")  # streamcheck: reuse (the default stream's next work)
    torch.cuda.synchronize()
    print(total.item(), reused.sum().item())


if __name__ == "__main__":
    main()
