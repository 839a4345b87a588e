"""Racy: a gradient hook makes its side stream wait for the default stream, but autograd ran on another stream.

Autograd runs each backward op, and the hooks it triggers, on the stream of the matching forward op: here the
training step runs on `compute`, so the gradient is written there. The hook's `wait_stream(default_stream())`
orders nothing that matters, and the copy on `reduce` may read the gradient before it is written (DeepSpeed
PR #7898 fixed this shape in ZeRO-3 by waiting for `current_stream()` instead).
"""

import torch


class Bucket:
    def __init__(self, params):
        self.reduce = torch.cuda.Stream()
        self.buffer = torch.zeros(sum(p.numel() for p in params), device="cuda")
        self.offset = 0
        for p in params:
            p.register_post_accumulate_grad_hook(self.add_grad)

    def add_grad(self, param):
        self.reduce.wait_stream(torch.cuda.default_stream())
        with torch.cuda.stream(self.reduce):  # streamcheck: switch
            n = param.grad.numel()
            self.buffer[self.offset:self.offset + n].copy_(param.grad.view(-1))  # streamcheck: race (read)
        self.offset += n

    def finish(self):
        torch.cuda.current_stream().wait_stream(self.reduce)
        return self.buffer.sum()


def main() -> None:
    compute = torch.cuda.Stream()
    weight = torch.ones(1 << 20, device="cuda", requires_grad=True)
    x = torch.full((1 << 20,), 2.0, device="cuda")
    bucket = Bucket([weight])
    torch.cuda.synchronize()
    with torch.cuda.stream(compute):
        loss = (weight * x).pow(2).sum()
        loss.backward()  # streamcheck: earlier (autograd writes weight.grad on `compute`)
        total = bucket.finish()
    torch.cuda.synchronize()
    print(total.item())


if __name__ == "__main__":
    main()
