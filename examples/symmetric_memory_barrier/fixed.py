"""Symmetric memory armed on the device, then announced when ready, fixed: every rank fills its symmetric buffer
with a sentinel, waits for its device, and only then passes the host barrier over a CPU (gloo) group: when the
peers read this rank's buffer through the handle, the fill has run, and every rank sees only sentinels.

Run on two GPUs:  torchrun --nproc-per-node 2 examples/symmetric_memory_barrier/fixed.py   (the racy twin is racy.py)
"""

import os

import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem

SENTINEL = -1.0


def main() -> None:
    if not torch.cuda.is_available() or "RANK" not in os.environ:
        print("symmetric_memory_barrier/fixed.py needs CUDA devices and torchrun; nothing to do")
        return
    rank = int(os.environ["RANK"])
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count())  # one GPU: the ranks share it
    dist.init_process_group("cpu:gloo,cuda:nccl")
    cpu_group = dist.new_group(backend="gloo")
    world = dist.get_world_size()
    buf = symm_mem.empty(1 << 22, device="cuda")
    handle = symm_mem.rendezvous(buf, dist.group.WORLD.group_name)
    busy = torch.randn(2048, 2048, device="cuda")
    for _ in range(8):
        busy = torch.tanh(busy @ busy)  # keeps this rank's stream busy: the fill below runs late
    buf.fill_(SENTINEL)
    torch.cuda.synchronize()  # the fill is done before any peer is let go
    dist.barrier(group=cpu_group)
    peer = (rank + 1) % world
    seen = handle.get_buffer(peer, (1 << 22,), torch.float32)
    armed = int((seen == SENTINEL).sum().item())
    print(f"fixed: rank {rank} sees {armed} of {seen.numel()} sentinels in rank {peer}'s buffer")
    torch.cuda.synchronize()
    dist.barrier(group=cpu_group)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
