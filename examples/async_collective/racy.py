"""Scenario 25, racy (2 ranks, NCCL): the buffer of an async all_reduce is read before work.wait().

Run: torchrun --nproc_per_node 2 racy.py. The NCCL stream writes t1 while the current stream reads it.
"""

import os

import torch
import torch.distributed as dist


def main() -> None:
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group("nccl")
    t1 = torch.full((1 << 20,), float(dist.get_rank() + 1), device="cuda")
    work = dist.all_reduce(t1, async_op=True)  # streamcheck: earlier
    total = t1.sum()  # streamcheck: race (read before work.wait())
    work.wait()
    torch.cuda.synchronize()
    print(total.item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
