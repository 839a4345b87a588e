"""A result handed out of a side stream with no edge back, racy: `Prefetcher.load` stages the batch on its own
stream and returns the staged tensor, and the caller reads it on the compute stream, which never waited for the
prefetch stream (the static scan sees only `load`'s side of it: a write on a side stream into what outlives the
call, read by nothing it can see and waited for by no one).

Run on one GPU:  python examples/result_not_waited/racy.py   (the fixed twin is fixed.py)
"""

import torch


class Prefetcher:
    def __init__(self, numel: int) -> None:
        self.stream = torch.cuda.Stream()
        with torch.cuda.stream(self.stream):  # allocated on the prefetch stream, which alone writes it
            self.staged = torch.empty(numel, device="cuda")

    def load(self, host_batch: torch.Tensor) -> torch.Tensor:
        with torch.cuda.stream(self.stream):  # streamcheck: switch
            self.staged.copy_(host_batch, non_blocking=True)  # streamcheck: earlier
        return self.staged


def main() -> None:
    if not torch.cuda.is_available():
        print("result_not_waited/racy.py needs a CUDA device; nothing to do")
        return
    prefetcher = Prefetcher(1 << 22)
    batch = torch.ones(1 << 22, pin_memory=True)
    staged = prefetcher.load(batch)
    total = staged.sum()  # streamcheck: race (the compute stream never waited for the prefetch stream)
    print(f"racy: summed {total.item():.0f} (expected {float(batch.numel()):.0f})")


if __name__ == "__main__":
    main()
