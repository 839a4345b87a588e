"""Scenario 34, fixed: the side stream waits for the default stream, where the compiled kernel wrote `y`."""

import torch


scale = torch.compile(lambda x: x * 2 + 1)  # one fused Triton kernel


def main() -> None:
    side = torch.cuda.Stream()
    x = torch.ones(1 << 20, device="cuda")
    scale(x)  # compiles (and runs) once
    torch.cuda.synchronize()
    y = scale(x)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        total = y.sum()
    torch.cuda.synchronize()
    print(total.item())


if __name__ == "__main__":
    main()
