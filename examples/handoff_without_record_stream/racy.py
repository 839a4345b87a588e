"""Racy: a tensor made on a side stream is handed to the current stream without record_stream(current).

The current stream waits for the side stream (the read is ordered), but the allocator still counts the block as the
side stream's alone: once `batch` is freed, the side stream's next allocation can take the block and write it while
the current stream may still be reading it. streamcheck reports it at that reuse, with the free and the current
stream's read as related locations; the scanner reports the read that needed the record.
"""

import torch


def main() -> None:
    side = torch.cuda.Stream()
    x = torch.ones(1 << 22, device="cuda")
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        batch = torch.cat([x, x])  # streamcheck: made (allocated on the side stream)
    torch.cuda.current_stream().wait_stream(side)
    total = batch.sum()  # streamcheck: earlier (read on the current stream)
    del batch  # streamcheck: race (freed while the current stream may still read it)
    with torch.cuda.stream(side):
        reused = torch.zeros(1 << 23, device="cuda")  # streamcheck: reuse (the side stream's next allocation)
    torch.cuda.synchronize()
    print(total.item(), reused.sum().item())


if __name__ == "__main__":
    main()
