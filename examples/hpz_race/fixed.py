"""The DeepSpeed ZeRO++ hpZ race in miniature (DeepSpeed 0.13.2-0.13.4, issue #5059): fixed version.

A parameter store keeps a secondary copy of each parameter's shard and refreshes it with `copy_` on the current
stream when the parameter is released. A coordinator later prefetches the parameters on its own all-gather stream,
through a closure the store attached to each parameter, and that all-gather reads the secondary copy. Nothing makes
the all-gather stream wait for the current stream, so the all-gather can read the copy before it has been written.

Run on one GPU (single-rank process group):  python examples/hpz_race/fixed.py
The all-gather stream now waits for the current stream before the all-gather (the better of the two fixes: an
edge between the streams; DeepSpeed 0.13.5 instead blocks the host after the copy). It prints 0 stale steps.
"""

from __future__ import annotations

import os
import sys
import tempfile

import torch
import torch.distributed as dist

STEPS = 20
SHARD_NUMEL = 1 << 22


class ParameterStore:
    """Owns each parameter's secondary shard, like ZeRO-3's `Init` owns `param.ds_secondary_tensor`."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def convert(self, param: torch.Tensor) -> None:
        param.secondary_shard = torch.zeros(param.numel(), device=self.device)

        def all_gather_shards(params):
            flat = torch.cat([p.secondary_shard for p in params])
            gathered = torch.empty(flat.numel() * dist.get_world_size(), device=flat.device)
            handle = dist.all_gather_into_tensor(gathered, flat, async_op=True)
            return handle, gathered

        # Like DeepSpeed: the closure is stored on the parameter and called through it.
        param.all_gather_shards = all_gather_shards

    def release(self, param: torch.Tensor) -> None:
        # Asynchronous to the host: enqueued on the current stream behind whatever it is still computing.
        param.secondary_shard.copy_(param.view(-1))


class Coordinator:
    """Prefetches parameters on a dedicated stream, like PartitionedParameterCoordinator."""

    def __init__(self) -> None:
        self.allgather_stream = torch.cuda.Stream()

    def fetch(self, params: list[torch.Tensor]) -> torch.Tensor:
        # The fix: the all-gather stream waits for everything already enqueued on the current stream (the copy).
        self.allgather_stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.allgather_stream):
            handle, gathered = params[0].all_gather_shards(params)
        handle.wait()
        torch.cuda.current_stream().wait_stream(self.allgather_stream)
        return gathered


def keep_current_stream_busy(device: torch.device) -> None:
    """Queue a few large matmuls so that work enqueued after them runs late."""
    a = torch.randn(4096, 4096, device=device)
    for _ in range(8):
        a = torch.tanh(a @ a)


def main() -> int:
    if not torch.cuda.is_available():
        print("hpz_race/fixed.py needs a CUDA device; nothing to do")
        return 0
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("nccl", init_method=f"file://{os.path.join(tmp, 'pg')}", rank=0, world_size=1)
        try:
            store, coordinator = ParameterStore(device), Coordinator()
            params = [torch.zeros(SHARD_NUMEL, device=device) for _ in range(2)]
            for param in params:
                store.convert(param)
            stale = 0
            for step in range(1, STEPS + 1):
                keep_current_stream_busy(device)
                for param in params:
                    param.fill_(float(step))
                    store.release(param)
                gathered = coordinator.fetch(params)
                if not bool((gathered == float(step)).all()):
                    stale += 1
            torch.cuda.synchronize()
        finally:
            dist.destroy_process_group()
    print(f"fixed: {stale} of {STEPS} steps gathered stale data")
    return 0


if __name__ == "__main__":
    sys.exit(main())
