"""A result handed out of a side stream with no edge back, fixed: `Prefetcher.load` makes the current stream wait
for its prefetch stream before it hands the staged tensor out.

Run on one GPU:  python examples/result_not_waited/fixed.py   (the racy twin is racy.py)
"""

import torch


class Prefetcher:
    def __init__(self, numel: int) -> None:
        self.stream = torch.cuda.Stream()
        with torch.cuda.stream(self.stream):  # allocated on the prefetch stream, which alone writes it
            self.staged = torch.empty(numel, device="cuda")

    def load(self, host_batch: torch.Tensor) -> torch.Tensor:
        with torch.cuda.stream(self.stream):
            self.staged.copy_(host_batch, non_blocking=True)
        torch.cuda.current_stream().wait_stream(self.stream)  # the edge back to the reader's stream
        return self.staged


def main() -> None:
    if not torch.cuda.is_available():
        print("result_not_waited/fixed.py needs a CUDA device; nothing to do")
        return
    prefetcher = Prefetcher(1 << 22)
    batch = torch.ones(1 << 22, pin_memory=True)
    staged = prefetcher.load(batch)
    total = staged.sum()
    print(f"fixed: summed {total.item():.0f} (expected {float(batch.numel()):.0f})")


if __name__ == "__main__":
    main()
