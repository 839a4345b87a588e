"""Instructions per op of the native backend on CPU, counted by callgrind: a figure a busy machine does not disturb.

    valgrind --tool=callgrind --callgrind-out-file=/tmp/cg/out.%p python benchmarks/instructions_per_op.py run [N]
    python benchmarks/instructions_per_op.py summary /tmp/cg/out.<pid>

`run` does N iterations of five ops (an in-place add, a slice, its fill, a view, a transpose: two that touch memory,
three views) per path, CPU tensors standing for device tensors on one stream (`set_cpu_as_device`), the paths in
turn twice: plain (no watch), fast (a native watch, ops decided in C++), boxed (the same with every op boxed:
`set_tuning("unboxed", False)`). After each path's N iterations it asks callgrind for a dump (`callgrind_control
-d`), so each dump holds one path's instructions alone. `summary` prints, per dump, the instructions per iteration
and, for the watched paths, over plain. (Wall-clock timings on a 2-core machine shared by four engineers varied by
more than the differences measured; instruction counts do not, though they say nothing of cache misses.)
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

PATHS = ("plain", "fast", "boxed")


def _dump(label: str) -> None:
    subprocess.run(["callgrind_control", "-d", label, str(os.getpid())], capture_output=True, check=False)


def _ops(n: int, x, y) -> None:
    for _ in range(n):
        x.add_(y)
        x[16:128].fill_(2.0)
        x.view(16, 16).t()


def run(n: int) -> None:
    import torch

    from streamcheck.instrument import native
    from streamcheck.instrument.watch import Watch

    module = native.load()
    for path in PATHS * 2:
        module.set_tuning("unboxed", path != "boxed")
        module.set_cpu_as_device(True)
        module.set_test_stream(1)
        watch = None
        if path != "plain":
            watch = Watch(tempfile.mkdtemp(prefix="instructions-"), rank=0, world_size=1, echo=False,
                          backend="native")
            watch.start()
        x, y = torch.zeros(256), torch.ones(256)
        _ops(20, x, y)  # warm: plans, sites, shadows
        _dump(f"warm-{path}")
        _ops(n, x, y)
        _dump(f"{path}-{n}")
        if watch is not None:
            watch.stop()
        module.set_cpu_as_device(False)
        module.set_test_stream(0)
        module.set_tuning("unboxed", True)


def summary(prefix: str) -> None:
    rows = []
    for dump in sorted(Path(prefix).parent.glob(Path(prefix).name + ".*"), key=lambda p: int(p.suffix[1:])):
        text = dump.read_text(errors="replace")
        label = re.search(r"^desc: Trigger: dump (\S+)", text, re.M)
        total = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
        if label and total and not label.group(1).startswith("warm-"):
            path, n = label.group(1).rsplit("-", 1)
            rows.append((path, int(total.group(1)) / int(n)))
    plain = [per for path, per in rows if path == "plain"]
    base = sum(plain) / len(plain) if plain else None
    for path, per in rows:
        over = f"  ({per - base:+8.0f} over plain, {(per - base) / 5:+6.0f} per op)" if base and path != "plain" else ""
        print(f"{path:<6} {per:10.0f} instructions per iteration of 5 ops{over}")


def main() -> int:
    if len(sys.argv) >= 2 and sys.argv[1] == "run":
        run(int(sys.argv[2]) if len(sys.argv) > 2 else 1000)
        return 0
    if len(sys.argv) == 3 and sys.argv[1] == "summary":
        summary(sys.argv[2])
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
