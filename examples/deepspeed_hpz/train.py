"""The seed workload: a 9-layer Llama (h=4096) under DeepSpeed ZeRO-3 with hpZ, random tokens, N steps.

    torchrun --nproc_per_node 2 examples/deepspeed_hpz/train.py --steps 10 --hpz 2 --result out.json

With DeepSpeed 0.13.2-0.13.4 the hpZ secondary-tensor race (upstream #5059) happens in every backward; 0.13.5 has
the fix. Rank 0 writes the per-step losses (as float.hex, to compare runs bit for bit) and step times to --result.
"""

from __future__ import annotations

import argparse
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
    losses, step_ms = [], []
    for step in range(args.steps):
        tokens = torch.randint(0, llama.vocab_size, (args.micro_batch, args.seq), generator=data)
        tokens = tokens.to(engine.device)
        torch.cuda.synchronize()
        start = time.perf_counter()
        loss = engine(input_ids=tokens, labels=tokens).loss
        engine.backward(loss)
        engine.step()
        torch.cuda.synchronize()
        step_ms.append((time.perf_counter() - start) * 1000)
        value = loss.float().item()
        losses.append(value)
        if rank == 0:
            print(f"step {step} loss {value!r} ({value.hex()}) {step_ms[-1]:.1f} ms", flush=True)
    if rank == 0:
        result = {
            "deepspeed": deepspeed.__version__,
            "torch": torch.__version__,
            "instrumented": os.environ.get("STREAMCHECK") == "1",
            "world_size": torch.distributed.get_world_size(),
            "hpz": args.hpz,
            "layers": args.layers,
            "losses": [v.hex() for v in losses],
            "step_ms": step_ms,
            "median_step_ms": statistics.median(step_ms),
            # the first step warms up caches and the allocator: the median of the others is the steady state
            "median_step_ms_after_first": statistics.median(step_ms[1:] if len(step_ms) > 1 else step_ms),
        }
        print("RESULT " + json.dumps(result), flush=True)
        if args.result:
            with open(args.result, "w") as out:
                json.dump(result, out, indent=1)
    torch.distributed.barrier()


if __name__ == "__main__":
    main()
