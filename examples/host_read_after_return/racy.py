"""Racy: a helper returns the destination of a non_blocking device-to-host copy, and its caller reads it on the host.

`to_host` copies into a pinned buffer with `non_blocking=True` and returns it at once; the copy may not have run
when the caller sums the buffer on the host (torchrec's `_cuda_to_cpu_safe` returns its buffer only after a stream
synchronize, which is what makes `_safe_tolist` right). The scanner follows the buffer through the return (SC102,
at the caller's read); streamcheck reports the host reading pinned memory the stream still writes (SC203).
"""

import torch


def to_host(device_tensor: torch.Tensor) -> torch.Tensor:
    host = torch.empty(device_tensor.shape, dtype=device_tensor.dtype, pin_memory=True)
    host.copy_(device_tensor, non_blocking=True)  # streamcheck: earlier (the stream writes the pinned buffer)
    return host


def main() -> None:
    if not torch.cuda.is_available():
        print("host_read_after_return/racy.py needs a CUDA device; nothing to do")
        return
    counts = torch.arange(1 << 16, device="cuda", dtype=torch.float32)
    total = to_host(counts).sum().item()  # streamcheck: race (the copy may not have landed yet)
    print(f"racy: {total:.0f} (expected {float(counts.numel() * (counts.numel() - 1) // 2):.0f})")


if __name__ == "__main__":
    main()
