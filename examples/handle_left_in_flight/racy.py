"""Racy (1 rank is enough, NCCL): a "synchronous" gather wrapper returns while its all-gathers still write the
caller's output tensors.

Run: python racy.py (one process on its own) or torchrun --nproc_per_node 1 racy.py. `gather_into` launches one
async all-gather per output (DeepSpeed's `all_gather_coalesced` with `async_op=False`), keeps the handles in a local
list and returns without waiting them: nothing can wait them any more, and the caller reads the outputs while NCCL
may still be writing them.
"""

import os
import tempfile

import torch
import torch.distributed as dist


def gather_into(outputs: list[torch.Tensor], inputs: list[torch.Tensor]) -> None:
    reqs = []
    for out, inp in zip(outputs, inputs):
        reqs.append(dist.all_gather_into_tensor(out, inp, async_op=True))  # streamcheck: earlier
    return None  # streamcheck: end (the handles die here, unwaited)


def main() -> None:
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    if "RANK" in os.environ:  # under torchrun
        dist.init_process_group("nccl")
    else:  # one process on its own
        dist.init_process_group("nccl", init_method=f"file://{tempfile.mktemp()}", rank=0, world_size=1)
    world = dist.get_world_size()
    inputs = [torch.full((1 << 22,), float(dist.get_rank() + 1), device="cuda")]
    outputs = [torch.empty(world * (1 << 22), device="cuda")]
    gather_into(outputs, inputs)
    total = outputs[0].sum()  # streamcheck: race (read while the all-gather may still write it)
    torch.cuda.synchronize()
    print(total.item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
