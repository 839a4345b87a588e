"""Racy: tensors held only by a bucket list are written on a side stream by a helper, then the bucket is cleared.

The shape of DeepSpeed ZeRO-1/2's gradient reduction (stage_1_and_2.py, `allreduce_and_copy`): the reducer hands
its list to a helper that works on the elements under the reduction stream, and clears the list once the call
returns. Clearing drops the last references, so the blocks go back to the current stream's pool while the side
stream may still be writing them; the next allocation on the current stream can take one. `record_stream` on each
element (fixed.py) keeps the allocator from reusing a block before the side stream's work is done.
streamcheck reports it at the current stream's next work, once per freed element: four times.
"""

import torch


class Reducer:
    def __init__(self) -> None:
        self.stream = torch.cuda.Stream()
        self.grads: list[torch.Tensor] = []

    def add(self, grad: torch.Tensor) -> None:
        self.grads.append(grad)

    def _scale_all(self, bucket: list[torch.Tensor]) -> None:
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            for buf in bucket:
                buf.mul_(0.5)  # streamcheck: earlier

    def reduce(self) -> None:
        self._scale_all(self.grads)
        self.grads.clear()  # streamcheck: race (the blocks are freed while the side stream may still write them)


def main() -> None:
    reducer = Reducer()
    for _ in range(4):
        reducer.add(torch.ones(1 << 20, device="cuda"))
    reducer.reduce()
    reused = torch.zeros(1 << 20, device="cuda")  # streamcheck: reuse (the current stream's next allocation)
    torch.cuda.synchronize()
    print(reused.sum().item())


if __name__ == "__main__":
    main()
