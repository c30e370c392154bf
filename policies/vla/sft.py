"""Supervised fine-tuning of a VLA on zarr demos with language instructions (`robot-rl vla-sft`).

Windows of `chunk_size` steps come from the episode store through `SequenceDataset` (one observed step, the
action chunk starting there, the last action repeated past the episode end); each window's instruction is its
episode's `meta["instruction"]` (written by `robot-rl collect`), unless the config overrides it.

LoRA through peft by default (`finetune=full` trains everything), bf16 autocast on CUDA, gradient
accumulation, adapters-only checkpoints that point at the base weights. Under `torchrun` (WORLD_SIZE > 1) the
policy is wrapped in torch DDP: each rank draws its own windows, gradients are all-reduced once per optimizer
step (no_sync on the accumulation micro-steps), rank 0 evaluates and writes checkpoints.

    robot-rl vla-sft data/pick.zarr --out runs/vla --base tiny --steps 300
    torchrun --nproc_per_node 8 -m robot_rl.cli vla-sft data/pick.zarr --out runs/vla --base /ckpt/pi0 --batch-size 32
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from robot_rl.demos.sampler import RamSource, SequenceDataset
from robot_rl.demos.store import EpisodeStore
from robot_rl.policies.vla.lora import LoraSettings, apply_lora
from robot_rl.policies.vla.pi0 import PI0Policy, VLAConfig, full_pi0_config, load_policy, tiny_pi0_config

__all__ = ["SFTConfig", "DemoWindows", "train_sft", "make_base_policy"]


@dataclass
class SFTConfig:
    store: str = ""
    out: str = "runs/vla_sft"
    base: str = "tiny"  # tiny | full (random-init pi0 architectures) | a local checkpoint directory
    instruction: str = ""  # overrides every episode's instruction ("" = the store's per-episode instruction)
    cameras: tuple[str, ...] = ("front", "wrist")
    chunk_size: int = 8  # random-init bases only; a loaded checkpoint keeps its own
    n_action_steps: int = 4
    finetune: str = "lora"  # lora | full
    lora: LoraSettings = field(default_factory=LoraSettings)
    fit_normalization: bool = True  # refit state/action mean/std on the demos (new robot) or keep the base's
    steps: int = 300
    batch_size: int = 16
    grad_accum: int = 1
    lr: float = 1e-3  # LoRA on a tiny model; ~1e-4 (LoRA) / 2.5e-5 (full) for a real pi0
    weight_decay: float = 0.0
    warmup_steps: int = 20
    grad_clip: float = 1.0
    val_fraction: float = 0.2
    val_every: int = 50
    val_windows: int = 256  # validation windows evaluated (fixed set, fixed noise: comparable across evals)
    save_every: int = 0  # 0 = only the final checkpoint
    bf16: bool = True  # autocast the fp32 weights to bfloat16 on a CUDA GPU with bf16 (ignored elsewhere)
    gradient_checkpointing: bool = False  # recompute activations: full-size pi0 at large batches
    in_ram: bool = True  # load the store into RAM (small stores) or read windows from disk
    device: str = "auto"
    seed: int = 0


class DemoWindows:
    """Training windows of one store, split by episode, with each window's instruction."""

    def __init__(self, store: str | os.PathLike[str], cameras: Sequence[str], chunk_size: int, *, in_ram: bool = True,
                 instruction: str = "", val_fraction: float = 0.2, seed: int = 0) -> None:  # fmt: skip
        with EpisodeStore(store, "r") as st:
            keys = ["state", *cameras]
            missing = [k for k in [*keys, "action"] if k not in st.keys]
            if missing:
                raise KeyError(f"{store} lacks {missing}; has {st.keys} (collect with --obs both or pixels)")
            self.ends = np.asarray(st.episode_ends, np.int64)
            metas = [st.meta(i) for i in range(len(st))]
            source: Any = RamSource.from_store(st, [*keys, "action"]) if in_ram else Path(store)
        self.instructions = [instruction or m.get("instruction") or m.get("task", "") for m in metas]
        full = SequenceDataset(source, horizon=chunk_size, n_obs_steps=1, obs_keys=keys, n_action_steps=chunk_size)
        self.train, self.val = full.split(val_fraction, seed) if val_fraction > 0 else (full, None)

    def stats(self) -> dict[str, np.ndarray]:
        """State and action mean/std over the training episodes' rows."""
        src = self.train.source
        starts = np.concatenate([[0], self.ends[:-1]])
        rows = np.concatenate([np.arange(starts[e], self.ends[e]) for e in self.train.episodes])
        out = {}
        for key, name in (("state", "state"), ("action", "action")):
            x = src.get_rows(key, rows).astype(np.float64)
            out[f"{name}_mean"], out[f"{name}_std"] = x.mean(0), x.std(0)
        return out

    def batch(self, ds: SequenceDataset, windows: np.ndarray) -> tuple[dict[str, Any], torch.Tensor]:
        """(obs with torch tensors and an "instruction" list, action chunks (B, chunk_size, Da))."""
        b = ds.get_batch(windows)
        episodes = np.searchsorted(self.ends, ds.table[windows, 0], side="right")
        obs: dict[str, Any] = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in b["obs"].items()}
        obs["instruction"] = [self.instructions[e] for e in episodes]
        return obs, torch.from_numpy(np.ascontiguousarray(b["action"])).float()


def make_base_policy(
    cfg: SFTConfig, state_dim: int, action_dim: int, instruction: str, out: Path, is_main: bool
) -> PI0Policy:
    """The base policy: random-init tiny/full pi0 (saved under out/base so adapters can point at it) or loaded.
    `instruction` becomes the policy's default (what the actor uses when observations carry none)."""
    vcfg = VLAConfig(instruction=instruction, cameras=tuple(cfg.cameras), state_dim=state_dim,
                     action_dim=action_dim, n_action_steps=cfg.n_action_steps)  # fmt: skip
    if cfg.base in ("tiny", "full"):
        if cfg.base == "tiny":
            mcfg = tiny_pi0_config(chunk_size=cfg.chunk_size, state_dim=state_dim, action_dim=action_dim)
        else:
            mcfg = full_pi0_config(cfg.chunk_size)
            vcfg.max_text_len = 48
        policy = PI0Policy.from_config(mcfg, vcfg, seed=cfg.seed)
        base = out / "base"
        if is_main:
            policy.save_pretrained(base)
        policy.base_path = base.resolve()
        return policy
    return load_policy(cfg.base, vcfg)


def _lr_lambda(cfg: SFTConfig) -> Callable[[int], float]:
    def f(step: int) -> float:
        if step < cfg.warmup_steps:
            return (step + 1) / cfg.warmup_steps
        p = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, p)))

    return f


@torch.no_grad()
def flow_validation_loss(policy: PI0Policy, data: DemoWindows, cfg: SFTConfig, autocast: Any) -> float:
    """Mean flow loss over a fixed set of validation windows with fixed time/noise draws."""
    ds = data.val if data.val is not None else data.train
    n = min(len(ds), cfg.val_windows)
    windows = np.random.default_rng(12345).choice(len(ds), size=n, replace=False)
    was_training = policy.training
    policy.eval()
    devices = [policy.device] if policy.device.type == "cuda" else []
    total = 0.0
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(12345)
        for i in range(0, n, cfg.batch_size):
            w = windows[i : i + cfg.batch_size]
            obs, act = data.batch(ds, w)
            with autocast():
                loss = policy(policy.prepare_inputs(obs), policy.target_chunk(act))
            total += float(loss) * len(w)
    policy.train(was_training)
    return total / n


def _setup_distributed(device: str) -> tuple[int, int, torch.device]:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    cuda = torch.cuda.is_available() and device in ("auto", "cuda")
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank() if world > 1 else 0
    if cuda:
        dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(dev)
    else:
        dev = torch.device("cpu" if device == "auto" else device)
    return rank, world, dev


def train_sft(cfg: SFTConfig, log: Callable[[str], None] = print) -> tuple[PI0Policy, dict[str, Any]]:
    """Fine-tune; returns the policy (eval mode) and a summary (losses, step time, checkpoint path), which is
    also written to out/summary.json."""
    rank, world, dev = _setup_distributed(cfg.device)
    is_main = rank == 0
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    chunk = cfg.chunk_size if cfg.base in ("tiny", "full") else _base_chunk(cfg)
    data = DemoWindows(cfg.store, cfg.cameras, chunk, in_ram=cfg.in_ram, instruction=cfg.instruction,
                       val_fraction=cfg.val_fraction, seed=cfg.seed)  # fmt: skip
    state_dim = int(data.train.source.get_rows("state", np.array([0])).shape[-1])
    action_dim = int(data.train.source.get_rows("action", np.array([0])).shape[-1])
    names, counts = np.unique(data.instructions, return_counts=True)
    policy = make_base_policy(cfg, state_dim, action_dim, str(names[counts.argmax()]), out, is_main)
    if cfg.fit_normalization:
        policy.set_normalization(**data.stats())
    if cfg.finetune == "lora":
        apply_lora(policy, cfg.lora)
    elif cfg.finetune == "full":
        policy.finetune = "full"
        policy.model.requires_grad_(True)
    else:
        raise ValueError(f"finetune must be 'lora' or 'full', got {cfg.finetune!r}")
    if cfg.gradient_checkpointing:
        policy.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    policy.to(dev).train()
    params = [p for p in policy.parameters() if p.requires_grad]
    n_train, n_all = sum(p.numel() for p in params), sum(p.numel() for p in policy.parameters())
    # Frozen VLM layers still produce the prefix KV cache, but the last VLM layer's query/output/MLP weights
    # never reach the loss (only its keys and values do), hence find_unused_parameters.
    module: torch.nn.Module = policy
    if world > 1:
        module = DistributedDataParallel(
            policy, device_ids=[dev.index] if dev.type == "cuda" else None, find_unused_parameters=True
        )
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _lr_lambda(cfg))
    # The weights stay fp32 (the optimizer's master copy) and bf16 comes from autocast, on a GPU with bf16 only:
    # CPU runs (the tiny config) stay fp32. bf16 weights on any device need nothing here: PI0Policy autocasts to
    # its weights' dtype itself. Not `bf16_is_fast`: that times a critic-sized net, and a VLA's matmuls and
    # activation memory are what bf16 is for.
    use_bf16 = cfg.bf16 and dev.type == "cuda" and torch.cuda.is_bf16_supported()

    def autocast() -> Any:
        return torch.autocast("cuda", dtype=torch.bfloat16) if use_bf16 else contextlib.nullcontext()

    rng = np.random.default_rng(cfg.seed + 1000 * rank)
    if is_main:
        log(f"vla-sft: {len(data.train)} train windows, {n_train:,} of {n_all:,} parameters trainable "
            f"({cfg.finetune}), world {world}, {dev}, {'bf16 autocast' if use_bf16 else 'no autocast'}")  # fmt: skip
    history: list[dict[str, float]] = []
    val0 = flow_validation_loss(policy, data, cfg, autocast) if is_main else float("nan")
    if is_main:
        history.append({"step": 0, "val_loss": val0})
        log(f"step     0  val {val0:.4f}")
    t_start, step_times = time.perf_counter(), []
    ckpt = out / "checkpoints"
    for step in range(1, cfg.steps + 1):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        train_loss = 0.0
        for micro in range(cfg.grad_accum):
            obs, act = data.batch(data.train, rng.integers(len(data.train), size=cfg.batch_size))
            sync = world == 1 or micro == cfg.grad_accum - 1
            ctx = contextlib.nullcontext() if sync else module.no_sync()
            with ctx:
                with autocast():
                    loss = module(policy.prepare_inputs(obs), policy.target_chunk(act)) / cfg.grad_accum
                loss.backward()
            train_loss += float(loss.detach())
        torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
        opt.step()
        sched.step()
        step_times.append(time.perf_counter() - t0)
        if is_main and (step % cfg.val_every == 0 or step == cfg.steps):
            val = flow_validation_loss(policy, data, cfg, autocast)
            history.append({"step": step, "train_loss": train_loss, "val_loss": val})
            log(f"step {step:5d}  train {train_loss:.4f}  val {val:.4f}  {np.mean(step_times[-50:]):.3f} s/step")
        if is_main and cfg.save_every and step % cfg.save_every == 0 and step < cfg.steps:
            policy.save(ckpt / f"step_{step:07d}", extra={"step": step})
    final = ckpt / "final"
    if is_main:
        policy.eval().save(final, extra={"step": cfg.steps, "sft": _jsonable(asdict(cfg))})
    if world > 1:
        dist.barrier()
    summary = {
        "checkpoint": str(final),
        "finetune": cfg.finetune,
        "trainable_params": n_train,
        "total_params": n_all,
        "steps": cfg.steps,
        "step_s": float(np.mean(step_times)) if step_times else 0.0,
        "wall_s": time.perf_counter() - t_start,
        "history": history,
    }
    if is_main:
        (out / "summary.json").write_text(json.dumps(summary, indent=1))
    return policy.eval(), summary


def _base_chunk(cfg: SFTConfig) -> int:
    raw = json.loads((Path(cfg.base) / "config.json").read_text())
    if "chunk_size" in raw:
        return int(raw["chunk_size"])
    meta = json.loads((Path(cfg.base) / "vla.json").read_text())
    return int(json.loads((Path(meta["base"]) / "config.json").read_text())["chunk_size"])


def _jsonable(x: Any) -> Any:
    return json.loads(json.dumps(x, default=str))
