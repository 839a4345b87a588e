"""Racy: activations offloaded to pinned host buffers on a side stream travel through a dict and are reloaded on
the current stream without waiting for the offload (the shape of Megatron-LM issue #7398).

`offload` copies the activation to a pinned buffer on `d2h` and stores the buffer in `self.saved`; `reload` takes
it out and copies it back to the device on the current stream, which never waited for `d2h`: the reload may read
the buffer before the offload filled it.
"""

import torch


class Offloader:
    def __init__(self):
        self.d2h = torch.cuda.Stream()
        self.done = torch.cuda.Event()
        self.saved = {}

    def offload(self, tag, x):
        self.d2h.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.d2h):
            host = torch.empty(x.shape, dtype=x.dtype, device="cpu", pin_memory=True)
            host.copy_(x, non_blocking=True)  # streamcheck: earlier (written on d2h)
            x.record_stream(self.d2h)
            self.done.record(self.d2h)
        self.saved[tag] = (x.device, host)

    def reload(self, tag):
        device, host = self.saved.pop(tag)
        back = torch.empty(host.shape, dtype=host.dtype, device=device)
        back.copy_(host, non_blocking=True)  # streamcheck: race (read on the current stream)
        return back


def main() -> None:
    offloader = Offloader()
    x = torch.arange(1 << 22, dtype=torch.float32, device="cuda")
    offloader.offload("layer0", x * 2)
    back = offloader.reload("layer0")
    torch.cuda.synchronize()
    print(back.sum().item())


if __name__ == "__main__":
    main()
