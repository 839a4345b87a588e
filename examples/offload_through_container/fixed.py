"""Fixed: the reload waits for the offload's event before it reads the pinned buffer that came through the dict."""

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
            host.copy_(x, non_blocking=True)
            x.record_stream(self.d2h)
            self.done.record(self.d2h)
        self.saved[tag] = (x.device, host)

    def reload(self, tag):
        device, host = self.saved.pop(tag)
        torch.cuda.current_stream().wait_event(self.done)
        back = torch.empty(host.shape, dtype=host.dtype, device=device)
        back.copy_(host, non_blocking=True)
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
