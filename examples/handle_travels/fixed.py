"""Fixed (1 rank is enough, NCCL): the travelling handle is waited before its buffer is read.

Run: torchrun --nproc_per_node 1 fixed.py.
"""

import os
import tempfile

import torch
import torch.distributed as dist


class Request:
    def __init__(self):
        self.work = None
        self.out = None


def start(req: Request, inp: torch.Tensor) -> None:
    out = torch.empty_like(inp)
    work = dist.all_to_all_single(out, inp, async_op=True)
    req.work = work
    req.out = out


def finish(req: Request) -> torch.Tensor:
    req.work.wait()
    req.work = None
    out = req.out
    req.out = None
    return out.sum()


def main() -> None:
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    if "RANK" in os.environ:  # under torchrun
        dist.init_process_group("nccl")
    else:  # one process on its own
        dist.init_process_group("nccl", init_method=f"file://{tempfile.mktemp()}", rank=0, world_size=1)
    inp = torch.full((1 << 22,), float(dist.get_rank() + 1), device="cuda")
    req = Request()
    start(req, inp)
    total = finish(req)
    torch.cuda.synchronize()
    print(total.item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
