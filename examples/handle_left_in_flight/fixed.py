"""Fixed twin of racy.py: the gather wrapper waits its handles before it returns (the current stream waits for the
all-gathers, without blocking the host), so the caller's read comes after the writes.

Run: python fixed.py or torchrun --nproc_per_node 1 fixed.py.
"""

import os
import tempfile

import torch
import torch.distributed as dist


def gather_into(outputs: list[torch.Tensor], inputs: list[torch.Tensor]) -> None:
    reqs = []
    for out, inp in zip(outputs, inputs):
        reqs.append(dist.all_gather_into_tensor(out, inp, async_op=True))
    for req in reqs:
        req.wait()
    return None


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
    total = outputs[0].sum()
    torch.cuda.synchronize()
    print(total.item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
