"""A Triton kernel's output read on another stream, racy: the program's own `@triton.jit` kernel stores its result
into `out` on a side stream, and the current stream sums `out` without waiting for the side stream. Both halves
read which arguments the kernel writes from its body (`tl.store(out_ptr + offs, ...)`): the lint from the source,
the instrumenter from the launched JITFunction's source.

Run on one GPU:  python examples/triton_kernel_write/racy.py   (the fixed twin is fixed.py)
"""

import torch
import triton
import triton.language as tl

N = 1 << 22
BLOCK = 1024


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(out_ptr + offs, x * 2 + 1, mask=offs < n)


def main() -> None:
    if not torch.cuda.is_available():
        print("triton_kernel_write/racy.py needs a CUDA device; nothing to do")
        return
    side = torch.cuda.Stream()
    x = torch.ones(N, device="cuda")
    out = torch.empty_like(x)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # streamcheck: switch
        scale_kernel[(triton.cdiv(N, BLOCK),)](x, out, N, BLOCK=BLOCK)  # streamcheck: earlier
    total = out.sum()  # streamcheck: race (the current stream never waited for the side stream's kernel)
    print(f"racy: summed {total.item():.0f} (expected {3.0 * N:.0f})")


if __name__ == "__main__":
    main()
