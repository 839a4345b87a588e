"""Fixed: each call of the gradient hook records the stream its copy ran on, and the reduction waits for every one
of them, not only for the current stream of the call that reduces (DeepSpeed 0.19.3's fix of PR #8080).

Run on one GPU:  python examples/bucket_across_hook_calls/fixed.py   (the racy twin is racy.py)
"""

import torch


class Bucket:
    def __init__(self, params, numel):
        self.reduction_stream = torch.cuda.Stream()
        self.buffers = [torch.zeros(numel, device="cuda"), torch.zeros(numel, device="cuda")]  # a double buffer
        self.index = 0
        self.copy_streams = set()  # the streams the copies into the bucket ran on
        self.reduced = torch.zeros(1, device="cuda")
        self.elements = 0
        self.numel = numel
        for p in params:
            p.register_post_accumulate_grad_hook(self.add_grad)

    def add_grad(self, param):
        if self.elements + param.numel() > self.numel:
            self.reduce_bucket()
        n = param.numel()
        self.buffers[self.index][self.elements:self.elements + n].copy_(param.grad.view(-1))
        self.copy_streams.add(torch.cuda.current_stream())
        self.elements += n

    def reduce_bucket(self):
        stream = self.reduction_stream
        for copy_stream in self.copy_streams:
            stream.wait_stream(copy_stream)  # every call's copy, whichever stream autograd ran it on
        self.copy_streams.clear()
        with torch.cuda.stream(stream):
            torch.sum(self.buffers[self.index], 0, keepdim=True, out=self.reduced)
        torch.cuda.current_stream().wait_stream(stream)  # later copies into this buffer come after the read
        self.index, self.elements = 1 - self.index, 0  # the next copies fill the other buffer

    def finish(self):
        torch.cuda.current_stream().wait_stream(self.reduction_stream)
        return self.reduced.item()


def main() -> None:
    if not torch.cuda.is_available():
        print("bucket_across_hook_calls/fixed.py needs a CUDA device; nothing to do")
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
    print(f"fixed: reduced {total:.0f} (expected {2.0 * n:.0f})")


if __name__ == "__main__":
    main()
