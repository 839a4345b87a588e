"""Scenario 34, racy: a torch.compile'd function writes `y` (an inductor Triton kernel on the default stream); a side
stream reads `y` without waiting for the default stream.

The Triton kernel never reaches the dispatcher: streamcheck sees it through inductor's launcher, on either backend,
while the program keeps running compiled."""

import torch


# One fused Triton kernel. On one line, so that both backends blame the same line: the native hook blames the
# compiled function's frame, the dispatch mode (under which compiled code may run eagerly) the ops inside it.
scale = torch.compile(lambda x: x * 2 + 1)  # streamcheck: earlier (the compiled kernel's write)


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
