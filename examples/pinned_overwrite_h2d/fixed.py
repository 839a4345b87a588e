"""Scenario 23, fixed: an event recorded after the copy is synchronized before the host reuses the pinned buffer."""

import torch


def main() -> None:
    h = torch.ones(1 << 16, pin_memory=True)
    d = torch.empty(h.shape, device="cuda")
    d.copy_(h, non_blocking=True)
    copied = torch.cuda.Event()
    copied.record()
    copied.synchronize()
    h.fill_(7.0)
    torch.cuda.synchronize()
    print(d.sum().item())


if __name__ == "__main__":
    main()
