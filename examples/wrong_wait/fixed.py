"""The wrong wait, fixed: the side stream waits for the compute stream before entering its `with` block, where
`torch.cuda.current_stream()` still is the compute stream, so the read follows the write.

Run on one GPU:  python examples/wrong_wait/fixed.py   (the racy twin is racy.py)
"""

import torch


def main() -> None:
    if not torch.cuda.is_available():
        print("wrong_wait/fixed.py needs a CUDA device; nothing to do")
        return
    side = torch.cuda.Stream()
    shard = torch.zeros(1 << 22, device="cuda")
    side.wait_stream(torch.cuda.current_stream())  # the side stream sees the zeros
    busy = torch.randn(2048, 2048, device="cuda")
    for _ in range(8):
        busy = torch.tanh(busy @ busy)  # keeps the compute stream busy: the write below runs late
    shard.fill_(1.0)
    side.wait_stream(torch.cuda.current_stream())  # outside the `with`: the compute stream
    with torch.cuda.stream(side):
        total = shard.sum()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    print(f"fixed: side stream summed {total.item():.0f} (expected {float(shard.numel()):.0f})")


if __name__ == "__main__":
    main()
