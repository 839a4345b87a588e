"""Scenario 32, fixed: `fut.wait()` inside the side stream, on the CUDA future c10d returns, makes that stream wait
for the collective (the future's CUDA event, recorded on NCCL's stream) before it reads the result."""

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
    future = dist.all_reduce(t, async_op=True).get_future()
    with torch.cuda.stream(side):
        future.wait()
        total = t.sum()
    torch.cuda.synchronize()
    print(total.item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
