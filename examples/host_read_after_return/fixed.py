"""Fixed: the helper waits for its copy before the buffer leaves it."""

import torch


def to_host(device_tensor: torch.Tensor) -> torch.Tensor:
    host = torch.empty(device_tensor.shape, dtype=device_tensor.dtype, pin_memory=True)
    host.copy_(device_tensor, non_blocking=True)
    torch.cuda.current_stream().synchronize()
    return host


def main() -> None:
    if not torch.cuda.is_available():
        print("host_read_after_return/fixed.py needs a CUDA device; nothing to do")
        return
    counts = torch.arange(1 << 16, device="cuda", dtype=torch.float32)
    total = to_host(counts).sum().item()
    print(f"fixed: {total:.0f} (expected {float(counts.numel() * (counts.numel() - 1) // 2):.0f})")


if __name__ == "__main__":
    main()
