"""Scenario 35, racy: a CUDA graph captured to write `out` is replayed on the default stream; a side stream reads
`out` without waiting for it.

A replay reaches no dispatcher: streamcheck keeps the accesses seen while the graph was captured and replays them
on the replaying stream, blamed on the captured op."""

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
        torch.mul(x, 3, out=out)  # streamcheck: earlier
    graph.replay()
    with torch.cuda.stream(side):
        total = out.sum()  # streamcheck: race (the replay on the default stream is not waited for)
    torch.cuda.synchronize()
    print(total.item())


if __name__ == "__main__":
    main()
