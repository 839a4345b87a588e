"""Scenario 35, fixed: the side stream waits for the default stream after the replay, then reads `out`."""

import torch


def main() -> None:
    side = torch.cuda.Stream()
    x = torch.ones(1 << 20, device="cuda")
    out = torch.empty_like(x)
    warm = torch.cuda.Stream()  # warm-up off the default stream, as CUDA graph capture wants
    warm.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(warm):
        torch.mul(x, 2, out=out)
    torch.cuda.current_stream().wait_stream(warm)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        torch.mul(x, 3, out=out)
    graph.replay()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        total = out.sum()
    torch.cuda.synchronize()
    print(total.item())


if __name__ == "__main__":
    main()
