"""Racy (1 rank is enough, NCCL): an async all-to-all's handle travels beside its buffer and is not waited.

Run: torchrun --nproc_per_node 1 racy.py. `start` stores the handle and the output on a request object (torchrec's
`Request`); `finish`, called later, clears the handle without waiting it and reads the output while NCCL may still
be writing it.
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
    work = dist.all_to_all_single(out, inp, async_op=True)  # streamcheck: earlier
    req.work = work
    req.out = out


def finish(req: Request) -> torch.Tensor:
    req.work = None  # dropped, never waited
    out = req.out
    req.out = None
    return out.sum()  # streamcheck: race (read before the handle is waited)


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
