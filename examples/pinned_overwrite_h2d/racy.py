"""Scenario 23, racy: the host overwrites a pinned buffer while a non_blocking host-to-device copy may still read it."""

import torch


def main() -> None:
    h = torch.ones(1 << 16, pin_memory=True)
    d = torch.empty(h.shape, device="cuda")
    d.copy_(h, non_blocking=True)  # streamcheck: earlier
    h.fill_(7.0)  # streamcheck: race (the copy may still be reading h)
    torch.cuda.synchronize()
    print(d.sum().item())


if __name__ == "__main__":
    main()
