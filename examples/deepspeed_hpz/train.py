"""The seed workload: a 9-layer Llama (h=4096) under DeepSpeed ZeRO-3 with hpZ, random tokens, N steps.

    torchrun --nproc_per_node 2 examples/deepspeed_hpz/train.py --steps 10 --hpz 2 --result out.json

With DeepSpeed 0.13.2-0.13.4 the hpZ secondary-tensor race (upstream #5059) happens in every backward; 0.13.5 has
the fix. Rank 0 writes the per-step losses (as float.hex, to compare runs bit for bit) and step times to --result.

`--phases plain,passthrough,streamcheck,csan` runs the steps once per phase in one process, on one model (what
benchmarks/overhead.py measures): each phase gets `--warmup` unmeasured steps, then `--steps` measured ones.
- plain: no instrumentation; passthrough: a TorchDispatchMode that only counts ops (ops per step come from it);
- streamcheck: `streamcheck.watch()` started at the phase (findings in --sc-out); it sees only what happens from
  then on, which is every step's whole life: the detector needs no history from before;
- csan: `torch.cuda._sanitizer` (last: it cannot be switched off). CSAN raises at its first race; with
  `--csan-continue` its raise is turned into a count (the same analysis per op, errors printed and counted), so a
  racy version (0.13.4) can still be timed.
`--soak-every N` prints, every N steps, the median step time of those N and the running watch's shadow-state
size (instrument/shadow_size.py) and the process's resident memory.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shims  # noqa: E402

shims.apply()
import deepspeed  # noqa: E402
import transformers  # noqa: E402


def ds_config(args: argparse.Namespace) -> dict:
    return {
        "train_micro_batch_size_per_gpu": args.micro_batch,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": 1.0,
        "bf16": {"enabled": True},
        "zero_optimization": {
            "stage": 3,
            "overlap_comm": True,
            "contiguous_gradients": True,
            "reduce_bucket_size": 16777216,
            "stage3_prefetch_bucket_size": 15099494.4,
            "stage3_max_live_parameters": 1e9,
            "stage3_max_reuse_distance": 1e9,
            "zero_hpz_partition_size": args.hpz,
        },
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }


class PhaseHooks:
    """What one phase switches on, and what it counts (ops per step, races)."""

    def __init__(self) -> None:
        self.ops = 0
        self.extra: dict = {}

    def reset_counts(self) -> None:
        self.ops = 0

    def summary(self, steps: int) -> dict:
        out = dict(self.extra)
        if self.ops:
            out["ops_per_step"] = self.ops / steps
        return out


@contextlib.contextmanager
def phase_hooks(phase: str, args: argparse.Namespace, rank: int):
    hooks = PhaseHooks()
    if phase == "plain":
        yield hooks
    elif phase == "passthrough":
        from torch.utils._python_dispatch import TorchDispatchMode

        class CountingMode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                hooks.ops += 1
                return func(*args, **(kwargs or {}))

        mode = CountingMode()
        mode.__enter__()  # kept entered, as streamcheck's is: the autograd engine's threads see it too
        try:
            yield hooks
        finally:
            mode.__exit__(None, None, None)
    elif phase in ("streamcheck", "streamcheck_mode"):
        from streamcheck.instrument.watch import Watch

        backend = "mode" if phase == "streamcheck_mode" else None  # None: STREAMCHECK_BACKEND, else the native hook
        watch = Watch(f"{args.sc_out}-{phase}", rank=rank, world_size=torch.distributed.get_world_size(),
                      backend=backend)
        watch.start()
        hooks.extra["backend"] = watch.backend
        hooks.extra["notes"] = watch.notes
        try:
            yield hooks
        finally:
            found = watch.stop()
            detector = watch.detector
            hooks.extra["findings"] = [f"{f.rule} {f.kind} x{f.count}: {f.message}" for f in found]
            hooks.extra["events"] = detector.seq
            hooks.extra["internal_errors"] = watch.errors
    elif phase == "csan":
        import torch.cuda._sanitizer as csan

        handler = csan.cuda_sanitizer.dispatch.event_handler
        errors = hooks.extra.setdefault("csan_errors", [0])
        if args.csan_continue:
            launch = handler._handle_kernel_launch

            def report_and_continue(*a, **k):
                found = launch(*a, **k)
                if found:
                    if not errors[0]:
                        print(f"[csan] rank {rank}: {found[0]}", file=sys.stderr, flush=True)
                    errors[0] += len(found)
                return []

            handler._handle_kernel_launch = report_and_continue
        csan.enable_cuda_sanitizer()
        yield hooks
    else:
        raise SystemExit(f"unknown phase {phase!r} (plain, passthrough, streamcheck, streamcheck_mode, csan)")


def soak_line(rank: int, step: int, window_ms: list) -> None:
    """One soak figure: step, median step time of the window, shadow state of the running watch, RSS."""
    from streamcheck.instrument import watch as watch_module
    from streamcheck.instrument.shadow_size import shadow_state_size

    current = watch_module._current
    state = shadow_state_size(current.detector) if current is not None and current.detector is not None else {}
    with open("/proc/self/statm") as statm:
        rss_mib = int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    print(f"SOAK rank {rank} step {step} median_ms {statistics.median(window_ms):.1f} rss_mib {rss_mib:.0f} "
          + " ".join(f"{k} {v}" for k, v in state.items()), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--hpz", type=int, default=2, help="zero_hpz_partition_size")
    parser.add_argument("--layers", type=int, default=9)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--intermediate", type=int, default=11008)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--micro-batch", type=int, default=2)
    parser.add_argument("--result", default=None, help="JSON file rank 0 writes (losses, step times)")
    parser.add_argument("--phases", default="plain", help="comma-separated: plain, passthrough, streamcheck, streamcheck_mode, csan")
    parser.add_argument("--warmup", type=int, default=0, help="unmeasured steps before each phase's --steps")
    parser.add_argument("--sc-out", default="sc-phase", help="findings directory of the streamcheck phase")
    parser.add_argument("--csan-continue", action="store_true", help="count CSAN's errors instead of raising")
    parser.add_argument("--soak-every", type=int, default=0, help="print step time and shadow memory every N steps")
    parser.add_argument("--local_rank", type=int, default=None)  # the deepspeed launcher passes it
    args = parser.parse_args()

    local_rank = int(os.environ.get("LOCAL_RANK", args.local_rank or 0))
    torch.cuda.set_device(local_rank)
    deepspeed.init_distributed()
    rank = torch.distributed.get_rank()
    config = ds_config(args)
    llama = transformers.LlamaConfig(hidden_size=args.hidden, intermediate_size=args.intermediate,
                                     num_hidden_layers=args.layers, num_attention_heads=args.heads,
                                     num_key_value_heads=args.heads, vocab_size=32000)
    torch.manual_seed(1234)
    with deepspeed.zero.Init(config_dict_or_path=config, dtype=torch.bfloat16):
        model = transformers.LlamaForCausalLM(llama)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)

    data = torch.Generator().manual_seed(4321 + rank)

    def one_step() -> tuple[float, float]:
        tokens = torch.randint(0, llama.vocab_size, (args.micro_batch, args.seq), generator=data)
        tokens = tokens.to(engine.device)
        torch.cuda.synchronize()
        start = time.perf_counter()
        loss = engine(input_ids=tokens, labels=tokens).loss
        engine.backward(loss)
        engine.step()
        torch.cuda.synchronize()
        elapsed = (time.perf_counter() - start) * 1000
        return elapsed, loss.float().item()

    phases = {}
    for phase in args.phases.split(","):
        with phase_hooks(phase, args, rank) as hooks:
            for _ in range(args.warmup):
                one_step()
            losses, step_ms = [], []
            hooks.reset_counts()
            window_start = 0
            for step in range(args.steps):
                elapsed, value = one_step()
                step_ms.append(elapsed)
                losses.append(value)
                if rank == 0:
                    print(f"[{phase}] step {step} loss {value!r} ({value.hex()}) {elapsed:.1f} ms", flush=True)
                if args.soak_every and (step + 1) % args.soak_every == 0:
                    soak_line(rank, step + 1, step_ms[window_start:])
                    window_start = step + 1
        phases[phase] = {  # after the phase's hooks are off: the streamcheck phase's findings are final
            "losses": [v.hex() for v in losses],
            "step_ms": step_ms,
            "median_step_ms": statistics.median(step_ms),
            "median_step_ms_after_first": statistics.median(step_ms[1:] if len(step_ms) > 1 else step_ms),
            **hooks.summary(args.steps),
        }
        if rank == 0:  # after every phase, so that a later phase that fails or hangs leaves the earlier ones
            write_result(args, phases, final=False)
    if rank == 0:
        write_result(args, phases, final=True)
    torch.distributed.barrier()


def write_result(args: argparse.Namespace, phases: dict, final: bool) -> None:
    """Rank 0's result: the first phase's figures at the top level (as before phases existed), every phase's."""
    first = phases[args.phases.split(",")[0]]
    result = {
        "deepspeed": deepspeed.__version__,
        "torch": torch.__version__,
        "instrumented": os.environ.get("STREAMCHECK") == "1",
        "world_size": torch.distributed.get_world_size(),
        "hpz": args.hpz,
        "layers": args.layers,
        "hidden": args.hidden,
        "warmup": args.warmup,
        **{k: first[k] for k in ("losses", "step_ms", "median_step_ms", "median_step_ms_after_first")},
        "phases": phases,
    }
    if final:
        print("RESULT " + json.dumps(result), flush=True)
    if args.result:
        with open(args.result, "w") as out:
            json.dump(result, out, indent=1)


if __name__ == "__main__":
    main()
