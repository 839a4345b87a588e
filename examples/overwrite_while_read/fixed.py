"""Write-after-read, fixed: a side stream reads a staging buffer; the current stream waits for the side stream
before it refills the buffer, so the read always sees the old contents.

Run on one GPU:  python examples/overwrite_while_read/fixed.py   (the racy twin is racy.py)
"""

import torch


def main() -> None:
    if not torch.cuda.is_available():
        print("overwrite_while_read/fixed.py needs a CUDA device; nothing to do")
        return
    side = torch.cuda.Stream()
    staging = torch.full((1 << 22,), 1.0, device="cuda")
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        busy = torch.randn(2048, 2048, device="cuda")
        for _ in range(8):
            busy = torch.tanh(busy @ busy)  # keeps the side stream busy: the read below runs late
        total = staging.sum()
    torch.cuda.current_stream().wait_stream(side)  # the edge back: the refill follows the read
    staging.fill_(2.0)
    torch.cuda.synchronize()
    print(f"fixed: side stream summed {total.item():.0f} (expected {float(staging.numel()):.0f})")


if __name__ == "__main__":
    main()
