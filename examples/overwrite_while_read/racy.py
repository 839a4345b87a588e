"""Write-after-read, racy: a side stream reads a staging buffer; the current stream then refills it for the next
step without waiting for the side stream, so the refill may land before the read (a ping-pong buffer without
its edge back). A wait in the other direction (side after current) orders nothing here.

Run on one GPU:  python examples/overwrite_while_read/racy.py   (the fixed twin is fixed.py)
"""

import torch


def main() -> None:
    if not torch.cuda.is_available():
        print("overwrite_while_read/racy.py needs a CUDA device; nothing to do")
        return
    side = torch.cuda.Stream()
    staging = torch.full((1 << 22,), 1.0, device="cuda")
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        busy = torch.randn(2048, 2048, device="cuda")
        for _ in range(8):
            busy = torch.tanh(busy @ busy)  # keeps the side stream busy: the read below runs late
        total = staging.sum()  # streamcheck: earlier
    staging.fill_(2.0)  # streamcheck: race (the current stream never waited for the side stream's read)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    print(f"racy: side stream summed {total.item():.0f} (expected {float(staging.numel()):.0f})")


if __name__ == "__main__":
    main()
