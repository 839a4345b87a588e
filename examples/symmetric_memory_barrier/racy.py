"""Symmetric memory armed on the device, then announced too early, racy: every rank fills its symmetric buffer with a
sentinel and passes a host barrier over a CPU (gloo) group. The barrier only says that each host *queued* its fill;
the peers then read this rank's buffer through the handle while the fill may still be waiting behind the busy
kernels before it, and see the old bytes (vLLM's Lamport and two-shot all-reduce buffers are armed this way).

Run on two GPUs:  torchrun --nproc-per-node 2 examples/symmetric_memory_barrier/racy.py   (the fixed twin is fixed.py)
"""

import os

import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem

SENTINEL = -1.0


def main() -> None:
    if not torch.cuda.is_available() or "RANK" not in os.environ:
        print("symmetric_memory_barrier/racy.py needs CUDA devices and torchrun; nothing to do")
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
    buf.fill_(SENTINEL)  # streamcheck: earlier
    dist.barrier(group=cpu_group)  # streamcheck: race (the peers go on while the fill may still be queued)
    peer = (rank + 1) % world
    seen = handle.get_buffer(peer, (1 << 22,), torch.float32)
    armed = int((seen == SENTINEL).sum().item())
    print(f"racy: rank {rank} sees {armed} of {seen.numel()} sentinels in rank {peer}'s buffer")
    torch.cuda.synchronize()
    dist.barrier(group=cpu_group)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
