"""Scenario 22, racy: the host reads a pinned buffer right after a non_blocking device-to-host copy into it.

`copy_(..., non_blocking=True)` into pinned memory returns before the copy ran: the host may read stale bytes.
"""

import torch


def main() -> None:
    d = torch.arange(1 << 16, device="cuda", dtype=torch.float32)
    h = torch.empty(d.shape, dtype=d.dtype, pin_memory=True)
    h.copy_(d, non_blocking=True)  # streamcheck: earlier
    total = h.sum()  # streamcheck: race (the copy may not have landed yet)
    print(total.item())


if __name__ == "__main__":
    main()
