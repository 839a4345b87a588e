"""Racy: an activation the offload stream still reads is stashed with the event recorded after that read, and handed
back on the current stream without waiting the event (the shape of DeepSpeed's forward stash in
offload_activations.py, less its `compute_stream.wait_event(event)`).

`offload` copies the activation to a pinned host buffer on `d2h` and keeps the activation with `d2h`'s event, so a
later `restore` can hand it back without a copy; `restore` takes the pair out and returns the activation, and the
caller overwrites it in place on the current stream while `d2h` may still be reading it for the host copy. The
`record_stream` keeps the block from the allocator; it does not order the caller's write after the read.
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
            host.copy_(x, non_blocking=True)  # streamcheck: earlier (x read on d2h)
        x.record_stream(self.d2h)
        self.stash[tag] = (x, self.d2h.record_event())
        return host

    def restore(self, tag):
        x, event = self.stash.pop(tag)  # streamcheck: taken (and returned with no wait for the event)
        return x


def main() -> None:
    stash = Stash()
    x = torch.arange(1 << 24, dtype=torch.float32, device="cuda") * 2
    host = stash.offload("layer0", x)
    y = stash.restore("layer0")
    y.mul_(3)  # streamcheck: race (written on the current stream)
    torch.cuda.synchronize()
    print(host.sum().item(), y.sum().item())


if __name__ == "__main__":
    main()
