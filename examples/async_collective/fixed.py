"""Scenario 25, fixed (2 ranks, NCCL): wait for the async all_reduce before reading its buffer."""

import os

import torch
import torch.distributed as dist


def main() -> None:
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group("nccl")
    t1 = torch.full((1 << 20,), float(dist.get_rank() + 1), device="cuda")
    work = dist.all_reduce(t1, async_op=True)
    work.wait()
    total = t1.sum()
    torch.cuda.synchronize()
    print(total.item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
