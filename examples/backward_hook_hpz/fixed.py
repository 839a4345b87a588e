"""Scenario 27, fixed: the backward hook makes the side stream wait for the compute stream before the prefetch."""

import torch


def main() -> None:
    side = torch.cuda.Stream()
    sec = torch.zeros(1 << 16, device="cuda")
    src = torch.randn(1 << 16, device="cuda")
    w = torch.randn(1 << 16, device="cuda", requires_grad=True)
    gathered = []

    def prefetch(grad: torch.Tensor) -> None:
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            gathered.append(sec * 2)

    w.register_hook(prefetch)
    loss = (w * src).sum()
    sec.copy_(src)
    loss.backward()
    torch.cuda.synchronize()
    print(gathered[0].sum().item())


if __name__ == "__main__":
    main()
