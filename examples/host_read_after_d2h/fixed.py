"""Scenario 22, fixed: the host waits for the stream that did the copy before it reads the pinned buffer."""

import torch


def main() -> None:
    d = torch.arange(1 << 16, device="cuda", dtype=torch.float32)
    h = torch.empty(d.shape, dtype=d.dtype, pin_memory=True)
    h.copy_(d, non_blocking=True)
    torch.cuda.current_stream().synchronize()
    total = h.sum()
    print(total.item())


if __name__ == "__main__":
    main()
