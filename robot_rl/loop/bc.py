"""Behaviour cloning of an action-chunk policy (`robot-rl train algo=bc_diffusion | bc_mlp`).

Demos come from the run's store (scripted, collected first) or `demos.path`; training samples windows with the
sequence sampler; the evaluated and checkpointed policy is an EMA of the weights. The checkpoint is what
residual RL and DSRL load as their frozen base (`residual.base=<run>/checkpoints/final`).
"""

from __future__ import annotations

import copy
import json
import signal
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from robot_rl.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from robot_rl.config import TrainConfig
from robot_rl.demos.sampler import RamSource, SequenceDataset
from robot_rl.envs import state_layout
from robot_rl.evaluation import evaluate
from robot_rl.loop.trainer import EvalLog, prepare_demos, print_eval_table, start_run
from robot_rl.policies.chunked import ChunkPolicy, make_chunk_policy
from robot_rl.sim.envs import make_env, obs_layout
from robot_rl.types import Batch


class BCState(nn.Module):
    """What a BC checkpoint holds: `policy` (the EMA, what everyone loads) and `model` (the trained weights)."""

    def __init__(self, model: ChunkPolicy) -> None:
        super().__init__()
        self.model = model
        self.policy = copy.deepcopy(model).requires_grad_(False)

    @torch.no_grad()
    def update_ema(self, decay: float) -> None:
        torch._foreach_lerp_(list(self.policy.parameters()), list(self.model.parameters()), 1.0 - decay)


def batch_of(data: SequenceDataset, windows: np.ndarray, device: torch.device) -> Batch:
    b = data.get_batch(windows)
    obs = {k: torch.from_numpy(v).to(device) for k, v in b["obs"].items()}
    return Batch.of_windows(obs, torch.from_numpy(b["action"]).float().to(device))


@torch.no_grad()
def validation_loss(policy: ChunkPolicy, data: SequenceDataset, device: torch.device, seed: int = 0) -> float:
    """Mean loss over all windows with fixed diffusion noise draws, so successive values compare."""
    torch.manual_seed(seed)
    losses = [
        policy.compute_loss(batch_of(data, np.arange(i, min(i + 512, len(data))), device))[0].item()
        for i in range(0, len(data), 512)
    ]
    return float(np.mean(losses))


def train_bc(cfg: TrainConfig) -> Path:
    """Trains (or resumes) a BC run; returns the path of its summary.json."""
    run_dir, device, config_yaml = start_run(cfg)
    bc, pcfg = cfg.bc, cfg.bc.policy

    eval_env = make_env(cfg.env, seed=cfg.seed + 1)
    state_dim, cameras, image_size = obs_layout(eval_env)
    store = prepare_demos(cfg, run_dir)
    keys = ["state", *cameras]
    source = RamSource.from_store(store, [*keys, "action"])
    data = SequenceDataset(source, pcfg.horizon, pcfg.n_obs_steps, keys, n_action_steps=pcfg.n_action_steps)
    train_set, val_set = data.split(bc.val_fraction, cfg.seed) if len(store) >= 5 else (data, None)

    model = make_chunk_policy(pcfg, state_dim, eval_env.action_space.shape[0], cameras, image_size or 64)
    model.encoder.set_state_normalization(torch.from_numpy(source.data["state"]), state_layout(eval_env))
    state = BCState(model).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=bc.lr, weight_decay=bc.weight_decay)
    step, wall_before = 0, 0.0
    ckpt_root = run_dir / "checkpoints"
    ckpt = latest_checkpoint(ckpt_root) if cfg.resume else None
    if ckpt is not None:
        counters = load_checkpoint(ckpt, state, {"bc": opt}, device=device)
        step, wall_before = counters["updates"], counters["wall_clock_s"]
        print(f"resumed {run_dir} from {ckpt.name}: {step} gradient steps")

    writer = SummaryWriter(str(run_dir / "tb"))
    rng = np.random.default_rng(cfg.seed + step)
    eval_log = EvalLog(run_dir, step if ckpt is not None else None)
    start = time.perf_counter()

    def wall() -> float:
        return wall_before + time.perf_counter() - start

    def checkpoint(name: str) -> None:
        counters = {"env_steps": 0, "updates": step, "episodes": 0, "wall_clock_s": wall()}
        save_checkpoint(ckpt_root, name, state, {"bc": opt}, counters, config_yaml)

    def run_eval(episodes: int) -> dict:
        res = evaluate(eval_env, state.policy.eval(), episodes, seed=1_000_000 + 1000 * cfg.seed)
        entry = {"env_steps": 0, "updates": step, **res.as_dict()}
        if val_set is not None:
            entry["val_loss"] = validation_loss(state.policy, val_set, device)
            writer.add_scalar("eval/val_loss", entry["val_loss"], step)
        writer.add_scalar("eval/success_rate", res.success_rate, step)
        eval_log.add(entry)
        return entry

    bar = tqdm(total=bc.steps, initial=step, desc="bc", unit="step", mininterval=2.0)
    model.train()
    interrupted = False
    try:
        while step < bc.steps:
            loss, metrics = model.compute_loss(
                batch_of(train_set, rng.integers(len(train_set), size=bc.batch_size), device)
            )
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            state.update_ema(bc.ema_decay)
            step += 1
            bar.update(1)
            if step % 100 == 0:
                for k, v in metrics.items():
                    writer.add_scalar(f"train/{k}", v, step)
                bar.set_postfix(loss=f"{loss.item():.4f}", refresh=False)
            if bc.eval_every and step % bc.eval_every == 0 and step < bc.steps:
                entry = run_eval(cfg.loop.eval_episodes)
                bar.write(f"step {step}: eval success {entry['success_rate']:.2f}")
                checkpoint(f"step_{step:08d}")
    except KeyboardInterrupt:  # Ctrl-C saves a resumable checkpoint and the summary, without a final evaluation
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        interrupted = True
    bar.close()

    try:
        final = {} if interrupted else run_eval(cfg.loop.final_eval_episodes)
    except KeyboardInterrupt:  # during the final evaluation: the run is saved all the same, as interrupted
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        interrupted, final = True, {}
    ckpt = f"step_{step:08d}" if interrupted else "final"
    checkpoint(ckpt)
    writer.close()
    summary = {
        "status": "interrupted" if interrupted else "finished",
        "algo": f"bc_{pcfg.kind}",
        "task": cfg.env.task,
        "obs": cfg.env.obs,
        "seed": cfg.seed,
        "final_success_rate": final.get("success_rate"),
        "final_success_ci": final.get("success_ci"),
        "final_val_loss": final.get("val_loss"),
        "updates": step,
        "wall_clock_s": round(wall(), 2),
        "demo_episodes": len(store),
        "device": str(device),
        "run_dir": str(run_dir),
        "checkpoint": str(ckpt_root / ckpt),
        "evals": eval_log.entries,
    }
    path = run_dir / "summary.json"
    path.write_text(json.dumps(summary, indent=1))
    print_eval_table(eval_log.entries)
    if interrupted:
        print(f"interrupted at step {step}: saved {ckpt_root / ckpt} and {path}; "
              f"continue with: robot-rl train resume={run_dir}", file=sys.stderr)  # fmt: skip
    return path
