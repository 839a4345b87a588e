"""Racy: a gradient hook copies each gradient into a shared bucket on its current stream; when the bucket is full,
the next call reduces it on a side stream that waits only for *that* call's current stream.

Autograd runs each hook call on the stream of its parameter's backward, so two calls can run on two streams: the
reduction waits for the second call's stream and reads the first call's copy, which nothing orders before it (the
shape of DeepSpeed PR #8080, ZeRO-1/2's IPG bucket filled from several producer streams). Here the two backward
passes run under two streams, so the two calls of the hook surely do.

Run on one GPU:  python examples/bucket_across_hook_calls/racy.py   (the fixed twin is fixed.py)
"""

import torch


class Bucket:
    def __init__(self, params, numel):
        self.reduction_stream = torch.cuda.Stream()
        self.buffers = [torch.zeros(numel, device="cuda"), torch.zeros(numel, device="cuda")]  # a double buffer
        self.index = 0
        self.reduced = torch.zeros(1, device="cuda")
        self.elements = 0
        self.numel = numel
        for p in params:
            p.register_post_accumulate_grad_hook(self.add_grad)

    def add_grad(self, param):
        if self.elements + param.numel() > self.numel:
            self.reduce_bucket()
        n = param.numel()
        self.buffers[self.index][self.elements:self.elements + n].copy_(param.grad.view(-1))  # streamcheck: earlier
        self.elements += n

    def reduce_bucket(self):
        stream = self.reduction_stream
        stream.wait_stream(torch.cuda.current_stream())  # only this call's stream: not the earlier copies'
        with torch.cuda.stream(stream):
            torch.sum(self.buffers[self.index], 0, keepdim=True, out=self.reduced)  # streamcheck: race (the first copy)
        torch.cuda.current_stream().wait_stream(stream)  # later copies into this buffer come after the read
        self.index, self.elements = 1 - self.index, 0  # the next copies fill the other buffer

    def finish(self):
        torch.cuda.current_stream().wait_stream(self.reduction_stream)
        return self.reduced.item()


def main() -> None:
    if not torch.cuda.is_available():
        print("bucket_across_hook_calls/racy.py needs a CUDA device; nothing to do")
        return
    n = 1 << 20
    first, second = torch.cuda.Stream(), torch.cuda.Stream()
    a = torch.ones(n, device="cuda", requires_grad=True)
    b = torch.ones(n, device="cuda", requires_grad=True)
    x = torch.full((n,), 2.0, device="cuda")
    bucket = Bucket([a, b], n)
    torch.cuda.synchronize()
    with torch.cuda.stream(first):  # a's backward, and its hook call, run on `first`
        (a * x).sum().backward()
    with torch.cuda.stream(second):  # b's on `second`: this call reduces the bucket a's call filled
        (b * x).sum().backward()
    total = bucket.finish()
    torch.cuda.synchronize()
    print(f"racy: reduced {total:.0f} (expected {2.0 * n:.0f})")


if __name__ == "__main__":
    main()
