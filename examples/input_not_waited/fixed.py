"""An input read on a side stream that never waited for its producer, fixed: `Offloader.offload` makes its side stream wait
for the current stream (where the caller made the activation) before it copies the activation to the host.

Run on one GPU:  python examples/input_not_waited/fixed.py   (the racy twin is racy.py)
"""

import torch


class Offloader:
    def __init__(self) -> None:
        self.side = torch.cuda.Stream()

    def offload(self, activation: torch.Tensor) -> torch.Tensor:
        host = torch.empty(activation.shape, dtype=activation.dtype, device="cpu", pin_memory=True)
        self.side.wait_stream(torch.cuda.current_stream())  # the edge: the side stream follows the producer
        with torch.cuda.stream(self.side):
            host.copy_(activation, non_blocking=True)
        self.side.synchronize()
        return host


def main() -> None:
    if not torch.cuda.is_available():
        print("input_not_waited/fixed.py needs a CUDA device; nothing to do")
        return
    offloader = Offloader()
    busy = torch.randn(2048, 2048, device="cuda")
    for _ in range(8):
        busy = torch.tanh(busy @ busy)  # keeps the compute stream busy: the activation below is made late
    host = offloader.offload(torch.tanh(busy[0]).mul_(0.0).add_(1.0))
    print(f"fixed: offloaded sum {host.sum().item():.0f} (expected {float(busy.shape[1]):.0f})")


if __name__ == "__main__":
    main()
