"""Racy: the end-of-backward callback makes the current stream wait for one of the hook's side streams, not both.

A gradient hook reduces the gradient into `shard` on one side stream, then scales it into `scaled` on a second
one; a pre-backward hook queues a callback (`Variable._execution_engine.queue_callback`) that autograd runs when
the backward pass ends, before `backward()` returns. The callback is where the hooks' work is handed back to the
code after `backward()`: it makes the current stream wait for the reduce stream and not for the scale stream, so
the read of `scaled` after `backward()` may run before the scale is done (the shape of FSDP1's
`_post_backward_final_callback`, which waits for the post-backward stream and, for HSDP, the all-reduce stream).

Run on one GPU:  python examples/callback_handback/racy.py   (the fixed twin is fixed.py)
"""

import functools

import torch
from torch.autograd import Variable


class State:
    def __init__(self, param):
        self.reduce_stream = torch.cuda.Stream()
        self.scale_stream = torch.cuda.Stream()
        self.shard = torch.zeros_like(param)
        self.scaled = torch.zeros_like(param)
        param.register_post_accumulate_grad_hook(functools.partial(post_backward_hook, self))


def post_backward_hook(state, param):
    state.reduce_stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(state.reduce_stream):
        state.shard.copy_(param.grad)
    state.scale_stream.wait_stream(state.reduce_stream)
    with torch.cuda.stream(state.scale_stream):  # streamcheck: switch
        torch.mul(state.shard, 0.5, out=state.scaled)  # streamcheck: earlier


def pre_backward_hook(state, grad):
    Variable._execution_engine.queue_callback(functools.partial(final_callback, state))  # runs when backward ends
    return grad


def final_callback(state):
    torch.cuda.current_stream().wait_stream(state.reduce_stream)  # and not for state.scale_stream


def main() -> None:
    if not torch.cuda.is_available():
        print("callback_handback/racy.py needs a CUDA device; nothing to do")
        return
    param = torch.ones(1 << 22, device="cuda", requires_grad=True)
    state = State(param)
    torch.cuda.synchronize()
    loss = (param * 3.0).sum()
    loss.register_hook(functools.partial(pre_backward_hook, state))
    loss.backward()
    total = state.scaled.sum()  # streamcheck: race (read)
    torch.cuda.synchronize()
    print(f"racy: {total.item():.0f} (expected {1.5 * param.numel():.0f})")


if __name__ == "__main__":
    main()
