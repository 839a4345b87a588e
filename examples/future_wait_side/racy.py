"""Scenario 32, racy: an async all_reduce's result is read on a side stream that never waited for it.

One-rank NCCL group: the collective still runs on NCCL's own stream. `fixed.py` waits with the CUDA future that
c10d returns (`work.get_future().wait()` inside the side stream), which orders only that stream after the
collective; streamcheck learns that from the future's CUDA event, recorded on NCCL's stream."""

import os
import socket

import torch
import torch.distributed as dist


def init_one_rank() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(port))
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))


def main() -> None:
    init_one_rank()
    side = torch.cuda.Stream()
    t = torch.ones(1 << 20, device="cuda")
    future = dist.all_reduce(t, async_op=True).get_future()  # streamcheck: earlier
    with torch.cuda.stream(side):
        total = t.sum()  # streamcheck: race (the side stream never waited for the all_reduce)
    future.wait()
    torch.cuda.synchronize()
    print(total.item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
