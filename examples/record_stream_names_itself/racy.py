"""Racy: `record_stream(torch.cuda.current_stream())` called inside the side stream's region records the side stream.

The batch is allocated on the side stream; inside `with torch.cuda.stream(side):` the current stream IS the side
stream, so the record names the allocation stream and changes nothing. The current stream reads the batch after
the region (ordered by the wait), but once `batch` is freed the side stream's next allocation can take the block
and overwrite it while that read may still run. The scanner reports the record that protects nothing (SC104, as
diffusers' group offloading before PR #12721); streamcheck reports the free at the side stream's reuse (SC202).
"""

import torch


def main() -> None:
    side = torch.cuda.Stream()
    host = torch.ones(1 << 22).pin_memory()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        batch = host.to("cuda", non_blocking=True)  # streamcheck: made (allocated on the side stream)
        batch.record_stream(torch.cuda.current_stream())  # streamcheck: record (names the side stream itself)
    torch.cuda.current_stream().wait_stream(side)
    total = batch.sum()  # streamcheck: earlier (read on the current stream)
    del batch  # streamcheck: race (freed while the current stream may still read it)
    with torch.cuda.stream(side):
        reused = torch.zeros(1 << 23, device="cuda")  # streamcheck: reuse (the side stream's next allocation)
    torch.cuda.synchronize()
    print(total.item(), reused.sum().item())


if __name__ == "__main__":
    main()
