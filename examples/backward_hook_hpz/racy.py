"""Scenario 27, racy: the hpZ shape with the read in a backward hook, on the autograd engine's thread.

After forward, `sec` is refreshed by a copy on the compute stream (DeepSpeed's `_partition_param_sec`); in
backward, a hook prefetches it on a side stream that never waited for the compute stream.
"""

import torch


def main() -> None:
    side = torch.cuda.Stream()
    sec = torch.zeros(1 << 16, device="cuda")
    src = torch.randn(1 << 16, device="cuda")
    w = torch.randn(1 << 16, device="cuda", requires_grad=True)
    gathered = []

    def prefetch(grad: torch.Tensor) -> None:
        with torch.cuda.stream(side):
            gathered.append(sec * 2)  # streamcheck: race (side never waited for the copy)

    w.register_hook(prefetch)
    loss = (w * src).sum()
    sec.copy_(src)  # streamcheck: earlier
    loss.backward()
    torch.cuda.synchronize()
    print(gathered[0].sum().item())


if __name__ == "__main__":
    main()
