"""The wrong wait, racy: the side stream is made to wait for `torch.cuda.current_stream()` *inside* its own `with`
block, where the current stream is the side stream itself: it waits for nothing, and the read of the shard can
run before the compute stream's write (the hpZ shape with a wait that looks right).

Run on one GPU:  python examples/wrong_wait/racy.py   (the fixed twin is fixed.py)
"""

import torch


def main() -> None:
    if not torch.cuda.is_available():
        print("wrong_wait/racy.py needs a CUDA device; nothing to do")
        return
    side = torch.cuda.Stream()
    shard = torch.zeros(1 << 22, device="cuda")
    side.wait_stream(torch.cuda.current_stream())  # the side stream sees the zeros
    busy = torch.randn(2048, 2048, device="cuda")
    for _ in range(8):
        busy = torch.tanh(busy @ busy)  # keeps the compute stream busy: the write below runs late
    shard.fill_(1.0)  # streamcheck: earlier
    with torch.cuda.stream(side):
        side.wait_stream(torch.cuda.current_stream())  # the current stream is `side` here: a wait for itself
        total = shard.sum()  # streamcheck: race (the side stream never waited for the compute stream's write)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    print(f"racy: side stream summed {total.item():.0f} (expected {float(shard.numel()):.0f})")


if __name__ == "__main__":
    main()
