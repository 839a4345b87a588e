"""Scenario 34, racy: a torch.compile'd function writes `y` (an inductor Triton kernel on the default stream); a side
stream reads `y` without waiting for the default stream.

The Triton kernel never reaches the dispatcher: streamcheck sees it through inductor's launcher, on either backend,
while the program keeps running compiled. Its write is blamed on the compiled function: inductor's generated code
is not the program's, and the function's own frame (its first line) is the innermost one that is."""

import torch


@torch.compile  # streamcheck: earlier (the compiled kernel's write, blamed on the compiled function)
def scale(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + 1  # one fused Triton kernel


def main() -> None:
    side = torch.cuda.Stream()
    x = torch.ones(1 << 20, device="cuda")
    scale(x)  # compiles (and runs) once
    torch.cuda.synchronize()
    y = scale(x)
    with torch.cuda.stream(side):
        total = y.sum()  # streamcheck: race (nothing orders the side stream after the compiled kernel)
    torch.cuda.synchronize()
    print(total.item())


if __name__ == "__main__":
    main()
