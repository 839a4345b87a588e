"""Fixed: an activation the offload stream still reads is stashed with the event recorded after that read, and the
current stream waits that event when the activation is taken back out (DeepSpeed's forward stash in
offload_activations.py: `self.compute_stream.wait_event(event)`).

The caller may then overwrite the restored activation in place: the offload stream's read of it for the host copy
is ordered before.
"""

import torch


class Stash:
    def __init__(self):
        self.d2h = torch.cuda.Stream()
        self.stash = {}

    def offload(self, tag, x):
        self.d2h.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.d2h):
            host = torch.empty(x.shape, dtype=x.dtype, device="cpu", pin_memory=True)
            host.copy_(x, non_blocking=True)
        x.record_stream(self.d2h)
        self.stash[tag] = (x, self.d2h.record_event())
        return host

    def restore(self, tag):
        x, event = self.stash.pop(tag)
        torch.cuda.current_stream().wait_event(event)
        return x


def main() -> None:
    stash = Stash()
    x = torch.arange(1 << 24, dtype=torch.float32, device="cuda") * 2
    host = stash.offload("layer0", x)
    y = stash.restore("layer0")
    y.mul_(3)
    torch.cuda.synchronize()
    print(host.sum().item(), y.sum().item())


if __name__ == "__main__":
    main()
