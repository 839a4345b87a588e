"""Hidden producers (issue 14): a Triton kernel of the scanned file writes the arguments its body stores through
(streamcheck/triton_kernels.py); a launch is no longer only a reader of its tensors."""

from __future__ import annotations

import ast
import textwrap

from static_helpers import findings_of, line_of

from streamcheck.triton_kernels import kernel_writes

KERNELS = """
    import triton
    import triton.language as tl

    @triton.jit
    def scale_kernel(x_ptr, out_ptr, n, stride, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs * stride, mask=offs < n)
        tl.store(out_ptr + offs * stride, x * 2, mask=offs < n)

    @triton.jit(do_not_specialize=["n"])
    def gather_kernel(ids_ptr, table_ptr, out_ptr, n):
        row = tl.program_id(0)
        idx = tl.load(ids_ptr + row)
        dst = out_ptr + row * n
        dst += tl.arange(0, 16)
        tl.store(dst, tl.load(table_ptr + idx * n + tl.arange(0, 16)))

    @triton.jit
    def _store_tile(ptr, value):
        tl.store(ptr, value)

    @triton.jit
    def calls_a_helper(src_ptr, acc_ptr, count_ptr):
        _store_tile(acc_ptr + tl.arange(0, 8), tl.load(src_ptr + tl.arange(0, 8)))
        tl.atomic_add(count_ptr, 1)

    @triton.jit
    def block_pointers(a_ptr, c_ptr, M, N):
        c_block = tl.make_block_ptr(base=c_ptr, shape=(M, N), strides=(N, 1), offsets=(0, 0),
                                    block_shape=(16, 16), order=(1, 0))
        desc = tl.make_tensor_descriptor(a_ptr, shape=[M, N], strides=[N, 1], block_shape=[16, 16])
        tl.store(c_block, desc.load([0, 0]))

    @triton.jit
    def descriptor_store(in_desc, out_desc):
        out_desc.store([0, 0], in_desc.load([0, 0]))

    def not_a_kernel(out_ptr):
        tl.store(out_ptr, 1)
"""


def test_the_parameters_a_kernel_stores_through():
    found = {name: sorted(k.written) for name, k in kernel_writes(ast.parse(textwrap.dedent(KERNELS))).items()}
    assert found == {
        "scale_kernel": ["out_ptr"],  # not `stride` (an offset), not BLOCK (constexpr), not x_ptr (loaded)
        "gather_kernel": ["out_ptr"],  # `dst` carries out_ptr; ids_ptr only loads the index used as an offset
        "_store_tile": ["ptr"],
        "calls_a_helper": ["acc_ptr", "count_ptr"],  # through the helper kernel, and an atomic
        "block_pointers": ["c_ptr"],
        "descriptor_store": ["out_desc"],
    }


LAUNCHER = KERNELS + """
    import torch

    def launch(x, side):
        out = torch.empty_like(x)
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            scale_kernel[(4,)](x, out, x.numel(), 1, BLOCK=256)
        {wait}
        return out.sum()
"""


def test_a_kernel_output_read_on_the_current_stream_without_a_wait():
    racy = LAUNCHER.replace("{wait}", "pass")
    [finding] = findings_of({"m.py": racy}, {"SC101"})
    assert (finding.rule, finding.kind, finding.primary.line) == ("SC101", "RAW", line_of(racy, "scale_kernel[(4,)]"))
    assert (finding.extra["path"], finding.extra["writer_stream"], finding.extra["reader_stream"]) == (
        "out", "side", "")
    assert finding.related[0].line == line_of(racy, "return out.sum()")


def test_the_current_stream_waits_for_the_kernel():
    fixed = LAUNCHER.replace("{wait}", "torch.cuda.current_stream().wait_stream(side)")
    assert findings_of({"m.py": fixed}, {"SC101"}) == []


# vLLM 0.33.0's fused_qkvr_prep (models/inkling/*/ops/qkvr_prep.py): the side-stream kernel fills caches the
# caller reads; the small-batch path before it launches a kernel on the same caches and returns.
HANDED_OUT = KERNELS + """
    import torch

    def _run(x, cache):
        scale_kernel[(4,)](x, cache, x.numel(), 1, BLOCK=256)

    def prep(x: torch.Tensor, cache: torch.Tensor, small: bool, side) -> None:
        if small:
            scale_kernel[(4,)](x, cache, x.numel(), 1, BLOCK=256)
            return
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            _run(x, cache)
        {wait}
"""


def test_a_cache_a_helper_kernel_fills_on_a_side_stream_is_handed_out_unwaited():
    racy = HANDED_OUT.replace("{wait}", "pass")
    [finding] = findings_of({"m.py": racy}, {"SC101"})
    launch = line_of(racy, "        _run(x, cache)")
    assert (finding.rule, finding.kind, finding.primary.line) == ("SC101", "RAW", launch)
    assert finding.message.startswith("`cache` is written by `scale_kernel[] in _run` on stream `side` and handed "
                                      "out of `prep`")
    fixed = HANDED_OUT.replace("{wait}", "torch.cuda.current_stream().wait_stream(side)")
    assert findings_of({"m.py": fixed}, {"SC101"}) == []


def test_the_parameters_a_kernel_loads_through():
    found = {name: sorted(k.loaded) for name, k in kernel_writes(ast.parse(textwrap.dedent(KERNELS))).items()}
    assert found == {
        "scale_kernel": ["x_ptr"],
        "gather_kernel": ["ids_ptr", "table_ptr"],
        "_store_tile": [],
        "calls_a_helper": ["count_ptr", "src_ptr"],  # an atomic reads what it adds to
        "block_pointers": ["a_ptr"],  # through the descriptor's `load`
        "descriptor_store": ["in_desc"],
    }


# A kernel in a module of its own that names no stream (a plain file: prefilter.py), launched from another module
# directly or through an op wrapper of its module (vLLM's ops files): the launch writes what the kernel stores.
KERNEL_MODULE = """
    import triton
    import triton.language as tl

    @triton.jit
    def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)

    def scale(x, out):
        scale_kernel[(4,)](x, out, x.numel(), BLOCK=256)
"""

LAUNCHES = """
    import torch

    from pkg import kernels
    from pkg.kernels import scale, scale_kernel

    def direct(x, side):
        out = torch.empty_like(x)
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            scale_kernel[(4,)](x, out, x.numel(), BLOCK=256)
        {wait}
        return out.sum()

    def through_the_module(x, side):
        out = torch.empty_like(x)
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            kernels.scale_kernel[(4,)](x, out, x.numel(), BLOCK=256)
        {wait}
        return out.sum()

    class Doubler:
        def through_a_wrapper(self, x, side):
            self.out = torch.empty_like(x)
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                scale(x, self.out)
            {wait}
            return self.out.sum()

    def only_loaded(x, side):
        out = torch.empty_like(x)
        doubled = torch.empty_like(x)
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            scale_kernel[(4,)](out, doubled, x.numel(), BLOCK=256)
        {wait}
        return out.sum()
"""


def _two_modules(wait: str) -> dict[str, str]:
    return {"pkg/__init__.py": "", "pkg/kernels.py": KERNEL_MODULE, "pkg/m.py": LAUNCHES.replace("{wait}", wait)}


def test_a_kernel_of_another_module_writes_what_it_stores_through():
    sources = _two_modules("pass")
    found = findings_of(sources, {"SC101"})
    racy = textwrap.dedent(sources["pkg/m.py"])
    returns = [n for n, line in enumerate(racy.splitlines(), 1) if "out.sum()" in line]
    launches = [line_of(racy, " scale_kernel[(4,)](x, out,"), line_of(racy, "kernels.scale_kernel[(4,)](x, out,"),
                line_of(racy, "scale(x, self.out)")]
    # (`only_loaded` hands `out` as the kernel's input: read there, written by nothing)
    assert sorted((f.rule, f.kind, f.primary.path, f.primary.line, f.extra["path"], f.related[0].line)
                  for f in found) == [("SC101", "RAW", "pkg/m.py", launch, path, read)
                                      for launch, read, path in zip(launches, returns, ["out", "out", "self.out"])]
    assert all(f.message.startswith(f"`{f.extra['path']}` is written by `tl.store in scale_kernel` on stream `side`")
               for f in found)


def test_the_current_stream_waits_for_the_kernel_of_another_module():
    assert findings_of(_two_modules("torch.cuda.current_stream().wait_stream(side)"), {"SC101"}) == []
