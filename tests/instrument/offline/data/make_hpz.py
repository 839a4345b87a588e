"""Writes the hpZ test data of tests/instrument/offline: two ranks' traces and the findings files the watch writes
from them.

    python tests/instrument/offline/data/make_hpz.py  # rewrites hpz-trace-rank{0,1}.jsonl and streamcheck-rank{0,1}.jsonl

The traces are synthetic: the event sequence the runtime records for two training steps of DeepSpeed 0.13.4's hpZ
(ZeRO-3, hpz=2, one layer's parameter shown), with the real DeepSpeed 0.13.4 file names, line numbers and source
lines, so that the reports read like the real one:
- forward: the all-gather of the primary partition on the all-gather stream, `work.wait()` there, then the compute
  stream waits for the all-gather stream (coordinator.py:318); a matmul on the compute stream;
- release after forward: `param.ds_secondary_tensor.copy_(...)` on the compute stream (partition_parameters.py:1643);
- backward, on the autograd engine's thread: the all-gather of the secondary tensor on the all-gather stream, which
  never waited for the compute stream -> RAW race (the hpZ bug), on both ranks, once per step;
- rank 0 only: the backward's gathered buffer is freed by the all-gather stream's allocation while the compute stream
  may still read it (no record_stream) -> FREE race, once per step.
The findings files are what `streamcheck.watch()` writes for these races: a header, each new finding once
(race_finding with rank and pid), then the final counts when the watch stops.

The committed files come from an earlier detector, which reported a FREE race at the free itself (today's
detector reports it at the pool stream's next work, issue 15), plus `extra.streams` added by hand where the watch
now writes it; running this script rewrites them with today's detector, and the tests of tests/instrument/offline pin the
committed ones.
"""

from __future__ import annotations

import json
import linecache
import sys
from pathlib import Path

from streamcheck.instrument.detector import Detector
from streamcheck.instrument.races import Names, race_finding
from streamcheck.instrument.trace import TraceWriter, read_trace, replay

HERE = Path(__file__).resolve().parent
SITE_PACKAGES = "/opt/venv/lib/python3.11/site-packages/"
PP = SITE_PACKAGES + "deepspeed/runtime/zero/partition_parameters.py"
COORD = SITE_PACKAGES + "deepspeed/runtime/zero/partitioned_param_coordinator.py"
OFFLOAD = SITE_PACKAGES + "deepspeed/runtime/zero/parameter_offload.py"
TRAIN = "/home/user/llama/train.py"

# The source lines the sites point at (DeepSpeed 0.13.4), so findings carry their snippets as on the real machine.
SOURCE = {
    (PP, 93): "    return instrument_w_nvtx(dist.allgather_fn)(output_tensor, input_tensor, group=group, async_op=True)",
    (PP, 1217): "                    handles = _dist_allgather_fn(",
    (PP, 1474): "                self._partition_param_sec(param)",
    (PP, 1494): "                param.data = torch.empty(1, dtype=param.dtype, device=param.device)",
    (PP, 1616): "                secondary_partitioned_tensor = torch.empty(secondary_partition_size,",
    (PP, 1643): "                    param.ds_secondary_tensor.copy_(sec_src_tensor)",
    (COORD, 318): "            get_accelerator().current_stream().wait_stream(self.__allgather_stream)",
    (COORD, 403): "                self.__release_param(param)",
    (COORD, 463): "                    handle = param_group[0].all_gather_coalesced(param_group, quantize=quantize)",
    (COORD, 482): "            param.partition()",
    (OFFLOAD, 452): "        param_coordinator.fetch_sub_module(sub_module, forward=True)",
    (OFFLOAD, 462): "        param_coordinator.release_sub_module(sub_module)",
    (OFFLOAD, 474): "        param_coordinator.fetch_sub_module(sub_module, forward=False)",
    (TRAIN, 41): "        return self.up_proj(x) * self.gate(x)",
    (TRAIN, 88): "        loss.backward()",
}

SITES = {
    1: [[PP, 1643, "_partition_param_sec"], [PP, 1474, "_partition"], [COORD, 482, "__release_param"],
        [COORD, 403, "release_sub_module"], [OFFLOAD, 462, "post_sub_module_forward_function"]],
    2: [[PP, 93, "_dist_allgather_fn"], [PP, 1217, "all_gather_coalesced"], [COORD, 463, "__all_gather_params_"],
        [OFFLOAD, 474, "pre_sub_module_backward_function"]],
    3: [[PP, 1616, "_partition_param_sec"], [PP, 1474, "_partition"]],
    4: [[PP, 93, "_dist_allgather_fn"], [PP, 1217, "all_gather_coalesced"], [COORD, 463, "__all_gather_params_"],
        [OFFLOAD, 452, "pre_sub_module_forward_function"]],
    5: [[COORD, 318, "fetch_sub_module"], [OFFLOAD, 452, "pre_sub_module_forward_function"]],
    6: [[TRAIN, 41, "forward"]],
    7: [[PP, 1494, "_partition_param"], [PP, 1474, "_partition"], [COORD, 482, "__release_param"]],
    8: [[TRAIN, 88, "main"]],
}

MAIN, ENGINE = "T139872", "T139911"
SEC_BYTES, FULL_BYTES = 8192, 32768  # bfloat16[4096] secondary partition, bfloat16[16384] full parameter


def record(writer, rank: int, steps: int = 2) -> None:
    compute, gather, nccl = f"cuda:{rank}/s0", f"cuda:{rank}/s94371", f"nccl:1/{rank}"
    sec, prim = 0x7F3A_0000_0000 + rank * 0x100000, 0x7F3A_0010_0000 + rank * 0x100000
    writer.stream_created(MAIN, gather)
    writer.stream_name(gather, "side stream created at parameter_offload.py:138")
    writer.alloc(prim, SEC_BYTES, compute, 3)
    writer.alloc(sec, SEC_BYTES, compute, 3)
    writer.storage_info(sec, shape=[4096], dtype="torch.bfloat16",
                        name="model.layers.0.mlp.up_proj.weight.ds_secondary_tensor", ds_id=7)
    event = 500
    for step in range(steps):
        full = 0x7F3B_0000_0000 + (rank * 16 + step * 2) * 0x100000
        grad_full = full + 0x100000
        # forward fetch: all-gather the primary partition into a fresh buffer, wait for it, compute
        writer.alloc(full, FULL_BYTES, gather, 4)
        writer.storage_info(full, shape=[16384], dtype="torch.bfloat16", name="model.layers.0.mlp.up_proj.weight",
                            ds_id=7)
        writer.collective(MAIN, gather, nccl, reads=[(prim, 0, SEC_BYTES)], writes=[(full, 0, FULL_BYTES)],
                          async_op=True, work=10 + step * 2, site=4, op="c10d::_allgather_base_")
        writer.work_wait(MAIN, gather, 10 + step * 2)
        event += 1
        writer.event_record(MAIN, event, gather)
        writer.event_wait(MAIN, event, compute)
        writer.kernel(MAIN, compute, reads=[(full, 0, FULL_BYTES)], site=6, op="aten::mm")
        # release after forward: the secondary partition is refreshed on the compute stream
        start = rank * SEC_BYTES
        writer.kernel(MAIN, compute, reads=[(full, start, start + SEC_BYTES)], writes=[(sec, 0, SEC_BYTES)],
                      site=1, op="aten::copy_")
        # backward, on the autograd engine's thread: the prefetch all-gathers the secondary tensor
        writer.thread_start(MAIN, ENGINE)
        writer.alloc(grad_full, FULL_BYTES, gather, 2)
        writer.collective(ENGINE, gather, nccl, reads=[(sec, 0, SEC_BYTES)], writes=[(grad_full, 0, FULL_BYTES)],
                          async_op=True, work=11 + step * 2, site=2, op="c10d::_allgather_base_")
        writer.work_wait(ENGINE, gather, 11 + step * 2)
        event += 1
        writer.event_record(ENGINE, event, gather)
        writer.event_wait(ENGINE, event, compute)
        writer.kernel(ENGINE, compute, reads=[(grad_full, 0, FULL_BYTES)], site=8, op="aten::mm")
        writer.thread_join(MAIN, ENGINE)
        if rank == 0:
            writer.free(MAIN, grad_full, 7)  # released without record_stream(compute)
    for site, frames in SITES.items():
        writer.site(site, frames)


def findings_lines(trace: Path, rank: int) -> list[dict]:
    """What the watch writes for this trace: header, each finding when first seen, final counts at stop()."""
    by_file: dict[str, list[str]] = {}
    for (path, line), text in SOURCE.items():
        lines = by_file.setdefault(path, [])
        lines.extend([""] * (line - len(lines)))
        lines[line - 1] = text + "\n"
    for path, lines in by_file.items():
        linecache.cache[path] = (sum(map(len, lines)), None, lines, path)
    detector = Detector()
    replay(read_trace(trace), detector)
    names = Names.of(detector)
    out: list[dict] = [{"e": "header", "format": "streamcheck-findings", "version": 1, "rank": rank,
                        "world_size": 2, "pid": 4100 + rank, "argv": ["train.py", "--hpz", "2"],
                        "started": 1796000000.0}]
    keys: dict[tuple, dict] = {}
    counts: dict[tuple, int] = {}
    for race in detector.races:
        key = (race.kind, race.earlier.site, race.later.site)
        if key in counts:
            counts[key] += 1
            continue
        record_ = race_finding(race, names, rank=rank, pid=4100 + rank).to_dict()
        keys[key], counts[key] = record_, 1
        out.append(record_)
    for key, record_ in keys.items():
        if counts[key] > 1:
            out.append({**record_, "count": counts[key]})
    return out


def main() -> int:
    for rank in (0, 1):
        trace = HERE / f"hpz-trace-rank{rank}.jsonl"
        with TraceWriter(trace, rank=rank, world_size=2, pid=4100 + rank) as writer:
            record(writer, rank)
        lines = findings_lines(trace, rank)
        with open(HERE / f"streamcheck-rank{rank}.jsonl", "w", encoding="utf-8") as out:
            for line in lines:
                out.write(json.dumps(line) + "\n")
        print(f"rank {rank}: {trace.name}, {len(lines) - 1} finding lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
