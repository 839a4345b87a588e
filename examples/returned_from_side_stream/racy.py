"""Racy: a helper restores a tensor on a side stream and returns it to its caller without record_stream(current).

`restore` makes the current stream wait for the copy (the caller's read is ordered), but the allocator still counts
the block as the side stream's alone: once the caller frees `first`, the next `restore` allocates on the side stream,
may be given the same block and copy into it while the current stream's `sum` may still be reading it (DeepSpeed's
activation offload engine restores each activation for autograd's unpack hook this way, and records it for the
current stream). The scanner reports the return (SC104 FREE), with the allocation as related location;
streamcheck reports the reuse at runtime (SC202), with the free and the read as related locations.
"""

import torch


class Restorer:
    def __init__(self) -> None:
        self.side = torch.cuda.Stream()

    def restore(self, host: torch.Tensor) -> torch.Tensor:
        with torch.cuda.stream(self.side):
            gpu = torch.empty(host.shape, dtype=host.dtype, device="cuda")  # streamcheck: reuse (on the side stream)
            gpu.copy_(host, non_blocking=True)
        torch.cuda.current_stream().wait_stream(self.side)
        return gpu  # streamcheck: returned (to a caller that uses it on the current stream; never recorded)


def main() -> None:
    if not torch.cuda.is_available():
        print("returned_from_side_stream/racy.py needs a CUDA device; nothing to do")
        return
    restorer = Restorer()
    host = torch.ones(1 << 22).pin_memory()
    first = restorer.restore(host)
    total = (first * first).sum()  # streamcheck: earlier (read on the current stream)
    del first  # streamcheck: race (freed while the current stream may still read it: back to the side pool)
    second = restorer.restore(host * 2)  # its allocation on the side stream may be given the block `first` had
    torch.cuda.synchronize()
    print(f"racy: {total.item():.0f} {second.sum().item():.0f} (expected {float(host.numel()):.0f})")


if __name__ == "__main__":
    main()
