"""A Triton kernel's output read on another stream, fixed: the current stream waits for the side stream, which
launched the kernel, before it reads the kernel's output.

Run on one GPU:  python examples/triton_kernel_write/fixed.py   (the racy twin is racy.py)
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
        print("triton_kernel_write/fixed.py needs a CUDA device; nothing to do")
        return
    side = torch.cuda.Stream()
    x = torch.ones(N, device="cuda")
    out = torch.empty_like(x)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        scale_kernel[(triton.cdiv(N, BLOCK),)](x, out, N, BLOCK=BLOCK)
    torch.cuda.current_stream().wait_stream(side)
    total = out.sum()
    print(f"fixed: summed {total.item():.0f} (expected {3.0 * N:.0f})")


if __name__ == "__main__":
    main()
