"""Fixed: `restore` records the tensor for the current stream before handing it back, so the allocator keeps its block
out of the side stream's pool until the caller's work on the current stream has run."""

import torch


class Restorer:
    def __init__(self) -> None:
        self.side = torch.cuda.Stream()

    def restore(self, host: torch.Tensor) -> torch.Tensor:
        with torch.cuda.stream(self.side):
            gpu = torch.empty(host.shape, dtype=host.dtype, device="cuda")
            gpu.copy_(host, non_blocking=True)
        torch.cuda.current_stream().wait_stream(self.side)
        gpu.record_stream(torch.cuda.current_stream())
        return gpu


def main() -> None:
    if not torch.cuda.is_available():
        print("returned_from_side_stream/fixed.py needs a CUDA device; nothing to do")
        return
    restorer = Restorer()
    host = torch.ones(1 << 22).pin_memory()
    first = restorer.restore(host)
    total = (first * first).sum()
    del first
    second = restorer.restore(host * 2)
    torch.cuda.synchronize()
    print(f"fixed: {total.item():.0f} {second.sum().item():.0f} (expected {float(host.numel()):.0f})")


if __name__ == "__main__":
    main()
