"""An input read on a side stream that never waited for its producer, racy: `Offloader.offload` copies the activation it is
handed to the host on its own stream, but the activation was made by the caller on the compute stream a moment
before, and nothing makes the side stream wait for that (the FPDT / activation-offload shape; the static scan sees
only `offload`'s side of it: an input, made outside the function on the current stream, read on a side stream).

Run on one GPU:  python examples/input_not_waited/racy.py   (the fixed twin is fixed.py)
"""

import torch


class Offloader:
    def __init__(self) -> None:
        self.side = torch.cuda.Stream()

    def offload(self, activation: torch.Tensor) -> torch.Tensor:
        host = torch.empty(activation.shape, dtype=activation.dtype, device="cpu", pin_memory=True)
        with torch.cuda.stream(self.side):  # streamcheck: switch
            host.copy_(activation, non_blocking=True)  # streamcheck: race (the side stream never waited for tanh)
        self.side.synchronize()
        return host


def main() -> None:
    if not torch.cuda.is_available():
        print("input_not_waited/racy.py needs a CUDA device; nothing to do")
        return
    offloader = Offloader()
    busy = torch.randn(2048, 2048, device="cuda")
    for _ in range(8):
        busy = torch.tanh(busy @ busy)  # keeps the compute stream busy: the activation below is made late
    host = offloader.offload(torch.tanh(busy[0]).mul_(0.0).add_(1.0))  # streamcheck: earlier
    print(f"racy: offloaded sum {host.sum().item():.0f} (expected {float(busy.shape[1]):.0f})")


if __name__ == "__main__":
    main()
