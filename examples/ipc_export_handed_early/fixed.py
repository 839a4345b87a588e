"""A CUDA IPC export handed out after the device filled it, fixed: the producer exports a buffer once with
`reduce_tensor`, fills it on the device behind busy kernels, and waits for the device before it returns the export,
so the consumer process that maps and reads it sees every one.

Run on one GPU:  python examples/ipc_export_handed_early/fixed.py   (the racy twin is racy.py)
"""

import torch
import torch.multiprocessing as mp
from torch.multiprocessing.reductions import reduce_tensor

N = 1 << 24


def consume(exports, counts) -> None:
    torch.zeros(1, device="cuda").item()  # the CUDA context exists before the export comes
    counts.put("ready")
    rebuild, args = exports.get()
    seen = rebuild(*args)
    counts.put(int((seen == 1.0).sum().item()))
    exports.get()  # the producer is done with the buffer: it may be freed


def produce(buf: torch.Tensor):
    rebuild, args = reduce_tensor(buf)
    busy = torch.randn(4096, 4096, device="cuda")
    for _ in range(400):
        busy = torch.tanh(busy @ busy)  # keeps the stream busy: the fill below runs late
    buf.fill_(1.0)
    torch.cuda.synchronize()  # the fill is done before the consumer gets the export
    return rebuild, args


def main() -> None:
    if not torch.cuda.is_available():
        print("ipc_export_handed_early/fixed.py needs a CUDA device; nothing to do")
        return
    spawn = mp.get_context("spawn")
    exports, counts = spawn.Queue(), spawn.Queue()
    consumer = spawn.Process(target=consume, args=(exports, counts))
    consumer.start()
    buf = torch.zeros(N, device="cuda")
    torch.cuda.synchronize()
    counts.get()  # the consumer is ready to read at once
    exports.put(produce(buf))
    print(f"fixed: the consumer saw {counts.get()} of {N} ones")
    exports.put(None)
    consumer.join()


if __name__ == "__main__":
    main()
