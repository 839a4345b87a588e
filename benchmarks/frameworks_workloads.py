"""The training setups benchmarks/frameworks_gpu.py runs, one GPU each: each builds its model and returns a `Loop`.

A Loop runs `steps` training steps and reports per step its time (ms, the device synchronized around it) and a
loss (as float.hex, so that runs compare bit for bit). Loops that own their training loop (Lightning, the HF
Trainer) time their steps with the framework's callbacks. Every setup seeds torch the same way, so a plain run and
a streamcheck run of one setup compute the same numbers.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path
from typing import Callable

import torch

ROOT = Path(__file__).resolve().parents[1]


def one_rank_group() -> None:
    """A one-rank NCCL group (collectives still run on NCCL's own stream)."""
    import torch.distributed as dist

    if dist.is_initialized():
        return
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    for key, value in (("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", str(port)), ("RANK", "0"),
                       ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0")):
        os.environ.setdefault(key, value)
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))


class Loop:
    """`run(steps)` -> (step times in ms, losses as hex); `step()` is one synchronized, timed training step."""

    def __init__(self, step: Callable[[], float]) -> None:
        self._step = step

    def run(self, steps: int) -> tuple[list, list]:
        times, losses = [], []
        for _ in range(steps):
            torch.cuda.synchronize()
            start = time.perf_counter()
            loss = self._step()
            torch.cuda.synchronize()
            times.append((time.perf_counter() - start) * 1000)
            losses.append(float(loss).hex())
        return times, losses


# ---- DeepSpeed (0.19.8) on a 4-layer Llama, h=1024 -------------------------------------------------------------------
def _llama():
    import transformers

    config = transformers.LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=4,
                                      num_attention_heads=16, num_key_value_heads=16, vocab_size=32000)
    torch.manual_seed(1234)
    return transformers.LlamaForCausalLM(config), config


def deepspeed_loop(stage: int, overlap_comm: bool = True, offload_optimizer: bool = False,
                   offload_param: bool = False) -> Loop:
    sys.path.insert(0, str(ROOT / "examples" / "deepspeed_hpz"))
    import shims

    shims.apply()
    import deepspeed

    one_rank_group()
    torch.cuda.set_device(0)
    deepspeed.init_distributed()
    zero: dict = {"stage": stage, "overlap_comm": overlap_comm, "contiguous_gradients": True,
                  "reduce_bucket_size": 16777216}
    if stage == 3:
        zero.update({"stage3_prefetch_bucket_size": 15099494, "stage3_max_live_parameters": 1e9,
                     "stage3_max_reuse_distance": 1e9})
    if offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if offload_param:
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    config = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
              "bf16": {"enabled": True}, "zero_optimization": zero, "zero_allow_untested_optimizer": True,
              "zero_force_ds_cpu_optimizer": False, "steps_per_print": 10**9, "wall_clock_breakdown": False}
    model, llama = _llama()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    data = torch.Generator().manual_seed(4321)

    def step() -> float:
        tokens = torch.randint(0, llama.vocab_size, (2, 256), generator=data).to(engine.device)
        loss = engine(input_ids=tokens, labels=tokens).loss
        engine.backward(loss)
        engine.step()
        return loss.float().item()

    return Loop(step)


# ---- torch.distributed on one rank ------------------------------------------------------------------------------------
def _mlp(width: int = 1024, depth: int = 4) -> torch.nn.Module:
    torch.manual_seed(1234)
    layers: list = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(width, 1))


def _regression_step(model: torch.nn.Module, optimizer, data: torch.Generator, width: int = 1024,
                     device: str = "cuda") -> Callable[[], float]:
    def step() -> float:
        x = torch.randn(64, width, generator=data).to(device, non_blocking=True)
        loss = model(x).float().pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.item()

    return step


def ddp_loop() -> Loop:
    from torch.nn.parallel import DistributedDataParallel

    one_rank_group()
    model = DistributedDataParallel(_mlp().cuda(), device_ids=[0])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    return Loop(_regression_step(model, optimizer, torch.Generator().manual_seed(4321)))


def fsdp2_loop(offload: bool = False, mixed_precision: bool = False) -> Loop:
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    one_rank_group()
    model = _mlp().cuda()
    options: dict = {}
    if offload:
        options["offload_policy"] = CPUOffloadPolicy()
    if mixed_precision:
        options["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, **options)
    fully_shard(model, **options)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    return Loop(_regression_step(model, optimizer, torch.Generator().manual_seed(4321)))


# ---- data loading and compiled steps -----------------------------------------------------------------------------------
def _pinned_loader(batches: int, width: int = 1024):
    torch.manual_seed(99)
    dataset = torch.utils.data.TensorDataset(torch.randn(batches * 64, width), torch.randn(batches * 64, 1))
    return torch.utils.data.DataLoader(dataset, batch_size=64, pin_memory=True, num_workers=2,
                                       persistent_workers=True)


def dataloader_loop(batches: int) -> Loop:
    model = _mlp().cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batches_iter = iter(_pinned_loader(batches))

    def step() -> float:
        x, y = next(batches_iter)
        x, y = x.to("cuda", non_blocking=True), y.to("cuda", non_blocking=True)
        loss = (model(x) - y).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.item()

    return Loop(step)


def compiled_loop() -> Loop:
    model = _mlp().cuda()
    compiled = torch.compile(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    return Loop(_regression_step(compiled, optimizer, torch.Generator().manual_seed(4321)))


class FrameworkLoop:
    """A loop a framework owns: `fit(steps)` trains and fills `times` / `losses` through its callbacks."""

    def __init__(self, fit: Callable[[int], None]) -> None:
        self.fit = fit
        self.times: list = []
        self.losses: list = []
        self._start = 0.0

    def begin(self) -> None:
        torch.cuda.synchronize()
        self._start = time.perf_counter()

    def end(self, loss: float | None) -> None:
        torch.cuda.synchronize()
        self.times.append((time.perf_counter() - self._start) * 1000)
        if loss is not None:
            self.losses.append(float(loss).hex())

    def run(self, steps: int) -> tuple[list, list]:
        self.times, self.losses = [], []
        self.fit(steps)
        return self.times, self.losses


def lightning_loop() -> FrameworkLoop:
    import lightning

    class Module(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = _mlp()

        def training_step(self, batch, index):
            x, y = batch
            return (self.net(x) - y).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-4)

    loop: FrameworkLoop

    class Timing(lightning.Callback):
        def on_train_batch_start(self, trainer, module, batch, index):
            loop.begin()

        def on_train_batch_end(self, trainer, module, outputs, batch, index):
            loop.end(outputs["loss"].item())

    def fit(steps: int) -> None:
        trainer = lightning.Trainer(max_steps=steps, accelerator="gpu", devices=1, logger=False,
                                    enable_checkpointing=False, enable_progress_bar=False,
                                    enable_model_summary=False, callbacks=[Timing()])
        trainer.fit(Module(), _pinned_loader(steps))

    loop = FrameworkLoop(fit)
    return loop


def hf_trainer_loop() -> FrameworkLoop:
    import transformers

    class Tokens(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 4096

        def __getitem__(self, index: int) -> dict:
            ids = torch.randint(0, 50257, (128,), generator=torch.Generator().manual_seed(index))
            return {"input_ids": ids, "labels": ids}

    loop: FrameworkLoop

    class Timing(transformers.TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            loop.begin()

        def on_step_end(self, args, state, control, **kwargs):
            loop.end(None)

    def fit(steps: int) -> None:
        torch.manual_seed(1234)
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=2, n_embd=512, n_head=8))
        args = transformers.TrainingArguments(output_dir="/tmp/hf-trainer", max_steps=steps,
                                              per_device_train_batch_size=8, bf16=True, report_to=[],
                                              dataloader_pin_memory=True, dataloader_num_workers=2,
                                              save_strategy="no", logging_strategy="no", seed=1234)
        trainer = transformers.Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=[Timing()])
        trainer.train()
        # no per-step loss from the Trainer without logging: the trained weights stand for the losses
        loop.losses.append(float(sum(p.detach().double().sum() for p in model.parameters())).hex())

    loop = FrameworkLoop(fit)
    return loop


# ---- a loop of small ops (no framework): the hook's per-op cost with little else in the step ----------------------
def op_loop(iterations: int = 200) -> Loop:
    """Per iteration 7 ops on 256x256 tensors, launch-bound: two fresh outputs a round (an allocation and a free
    each), an in-place write, a reduction, two views and a fill of one; one stream."""
    torch.manual_seed(1234)
    x = torch.randn(256, 256, device="cuda")
    w = torch.randn(256, 256, device="cuda")
    b = torch.randn(256, device="cuda")

    def step() -> float:
        z = None
        for _ in range(iterations):
            y = torch.mm(x, w)
            y = y + b
            y.mul_(0.5)
            z = y.sum()
            y.view(-1)[:128].fill_(0.0)
        return z.item()

    return Loop(step)


SETUPS: dict[str, Callable[[int], object]] = {
    "op-loop": lambda steps: op_loop(),
    "deepspeed-zero1": lambda steps: deepspeed_loop(1),
    "deepspeed-zero2": lambda steps: deepspeed_loop(2, overlap_comm=False),
    "deepspeed-zero2-overlap": lambda steps: deepspeed_loop(2, overlap_comm=True),
    "deepspeed-zero2-offload-optimizer": lambda steps: deepspeed_loop(2, offload_optimizer=True),
    "deepspeed-zero3": lambda steps: deepspeed_loop(3),
    "deepspeed-zero3-offload": lambda steps: deepspeed_loop(3, offload_optimizer=True, offload_param=True),
    "fsdp2": lambda steps: fsdp2_loop(),
    "fsdp2-offload-mixed-precision": lambda steps: fsdp2_loop(offload=True, mixed_precision=True),
    "ddp": lambda steps: ddp_loop(),
    "dataloader-pinned-workers": lambda steps: dataloader_loop(steps + 4),
    "lightning-trainer": lambda steps: lightning_loop(),
    "hf-trainer": lambda steps: hf_trainer_loop(),
    "torch-compile": lambda steps: compiled_loop(),
}
# Steps run before the measured ones, outside the watch: compiling belongs to no training step.
WARMUP_OUTSIDE = {"torch-compile": 2}
