"""Fixed: the gradient hook makes its side stream wait for the hook's current stream, the one autograd wrote on."""

import torch


class Bucket:
    def __init__(self, params):
        self.reduce = torch.cuda.Stream()
        self.buffer = torch.zeros(sum(p.numel() for p in params), device="cuda")
        self.offset = 0
        for p in params:
            p.register_post_accumulate_grad_hook(self.add_grad)

    def add_grad(self, param):
        self.reduce.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.reduce):
            n = param.grad.numel()
            self.buffer[self.offset:self.offset + n].copy_(param.grad.view(-1))
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
        loss.backward()
        total = bucket.finish()
    torch.cuda.synchronize()
    print(total.item())


if __name__ == "__main__":
    main()
