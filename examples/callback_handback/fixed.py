"""Fixed: the end-of-backward callback makes the current stream wait for both of the hook's side streams.

The racy twin's hooks and callback, with the callback's missing wait: the current stream waits for both side
streams the post-backward hook wrote on before `backward()` returns, so the read of `scaled` after it is ordered.

Run on one GPU:  python examples/callback_handback/fixed.py   (the racy twin is racy.py)
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
    with torch.cuda.stream(state.scale_stream):
        torch.mul(state.shard, 0.5, out=state.scaled)


def pre_backward_hook(state, grad):
    Variable._execution_engine.queue_callback(functools.partial(final_callback, state))  # runs when backward ends
    return grad


def final_callback(state):
    torch.cuda.current_stream().wait_stream(state.reduce_stream)
    torch.cuda.current_stream().wait_stream(state.scale_stream)


def main() -> None:
    if not torch.cuda.is_available():
        print("callback_handback/fixed.py needs a CUDA device; nothing to do")
        return
    param = torch.ones(1 << 22, device="cuda", requires_grad=True)
    state = State(param)
    torch.cuda.synchronize()
    loss = (param * 3.0).sum()
    loss.register_hook(functools.partial(pre_backward_hook, state))
    loss.backward()
    total = state.scaled.sum()
    torch.cuda.synchronize()
    print(f"fixed: {total.item():.0f} (expected {1.5 * param.numel():.0f})")


if __name__ == "__main__":
    main()
