"""Behaviour cloning of an action-chunk policy (`robot-rl train algo=bc_diffusion | bc_mlp`).

Demos come from the run's store (scripted, collected first) or `demos.path`; training samples windows with the
sequence sampler; the evaluated and checkpointed policy is an EMA of the weights. The checkpoint is what
residual RL and DSRL load as their frozen base (`residual.base=<run>/checkpoints/final`).
"""

from __future__ import annotations

import copy
import signal
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from robot_rl.checkpoint import Checkpoint, latest_checkpoint, save_checkpoint
from robot_rl.config import TrainConfig
from robot_rl.demos.sampler import RamSource, SequenceDataset
from robot_rl.envs import make_env
from robot_rl.evaluation import evaluate
from robot_rl.loop.run import EvalLog, prepare_demos, start_run, write_summary
from robot_rl.policies.chunked import ChunkPolicy, make_chunk_policy
from robot_rl.types import Batch, ObsLayout


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


class BCRun:
    """A BC run: demos as sequence windows, the chunk policy and its EMA, evaluation, checkpoints, logs."""

    def __init__(self, cfg: TrainConfig) -> None:
        self.cfg = cfg
        self.run_dir, self.device, self.config_yaml = start_run(cfg)
        self.eval_env = make_env(cfg.env, seed=cfg.seed + 1)
        self.layout = ObsLayout.of_env(self.eval_env, cfg.env.max_step, cfg.env.control_hz)
        self.store = prepare_demos(cfg, self.run_dir)
        pcfg, lay = cfg.bc.policy, self.layout
        keys = ["state", *lay.cameras]
        source = RamSource.from_store(self.store, [*keys, "action"])
        data = SequenceDataset(source, pcfg.horizon, pcfg.n_obs_steps, keys, n_action_steps=pcfg.n_action_steps)
        self.train_set, self.val_set = (
            data.split(cfg.bc.val_fraction, cfg.seed) if len(self.store) >= 5 else (data, None)
        )
        model = make_chunk_policy(pcfg, lay.state_dim, lay.action_dim, lay.cameras, lay.image_size or 64)
        model.encoder.set_state_normalization(torch.from_numpy(source.data["state"]), lay.state)
        self.model, self.state = model, BCState(model).to(self.device)
        self.opt = torch.optim.AdamW(model.parameters(), lr=cfg.bc.lr, weight_decay=cfg.bc.weight_decay)
        self.ckpt_root = self.run_dir / "checkpoints"
        self.step, wall_before = 0, 0.0
        ckpt = latest_checkpoint(self.ckpt_root) if cfg.resume else None
        if ckpt is not None:
            counters = Checkpoint(ckpt).restore(self.state, {"bc": self.opt}, device=self.device)
            self.step, wall_before = counters["updates"], counters["wall_clock_s"]
            print(f"resumed {self.run_dir} from {ckpt.name}: {self.step} gradient steps")
        self.writer = SummaryWriter(str(self.run_dir / "tb"))
        self.eval_log = EvalLog(self.run_dir, self.step if ckpt is not None else None)
        self._wall = wall_before - time.perf_counter()

    @property
    def wall_clock_s(self) -> float:
        return self._wall + time.perf_counter()

    def checkpoint(self, name: str) -> None:
        counters = {"env_steps": 0, "updates": self.step, "episodes": 0, "wall_clock_s": self.wall_clock_s}
        save_checkpoint(self.ckpt_root, name, self.state, {"bc": self.opt}, counters, self.config_yaml,
                        layouts={"env": self.layout, "policy": self.layout})  # fmt: skip

    def evaluate(self, episodes: int) -> dict:
        res = evaluate(self.eval_env, self.state.policy.eval(), episodes, seed=1_000_000 + 1000 * self.cfg.seed)
        entry = {"env_steps": 0, "updates": self.step, **res.as_dict()}
        if self.val_set is not None:
            entry["val_loss"] = validation_loss(self.state.policy, self.val_set, self.device)
            self.writer.add_scalar("eval/val_loss", entry["val_loss"], self.step)
        self.writer.add_scalar("eval/success_rate", res.success_rate, self.step)
        self.eval_log.add(entry)
        return entry

    def train(self) -> None:
        """Gradient steps up to `bc.steps`, evaluating and checkpointing every `bc.eval_every`."""
        bc, rng = self.cfg.bc, np.random.default_rng(self.cfg.seed + self.step)
        bar = tqdm(total=bc.steps, initial=self.step, desc="bc", unit="step", mininterval=2.0)
        self.model.train()
        try:
            while self.step < bc.steps:
                windows = rng.integers(len(self.train_set), size=bc.batch_size)
                loss, metrics = self.model.compute_loss(batch_of(self.train_set, windows, self.device))
                self.opt.zero_grad(set_to_none=True)
                loss.backward()
                self.opt.step()
                self.state.update_ema(bc.ema_decay)
                self.step += 1
                bar.update(1)
                if self.step % 100 == 0:
                    for k, v in metrics.items():
                        self.writer.add_scalar(f"train/{k}", v, self.step)
                    bar.set_postfix(loss=f"{loss.item():.4f}", refresh=False)
                if bc.eval_every and self.step % bc.eval_every == 0 and self.step < bc.steps:
                    entry = self.evaluate(self.cfg.loop.eval_episodes)
                    bar.write(f"step {self.step}: eval success {entry['success_rate']:.2f}")
                    self.checkpoint(f"step_{self.step:08d}")
        finally:
            bar.close()

    def finish(self, interrupted: bool) -> Path:
        final = {} if interrupted else self.evaluate(self.cfg.loop.final_eval_episodes)
        ckpt = f"step_{self.step:08d}" if interrupted else "final"
        self.checkpoint(ckpt)
        self.writer.close()
        cfg = self.cfg
        summary = {
            "status": "interrupted" if interrupted else "finished",
            "algo": f"bc_{cfg.bc.policy.kind}",
            "task": cfg.env.task,
            "obs": cfg.env.obs,
            "seed": cfg.seed,
            "final_success_rate": final.get("success_rate"),
            "final_success_ci": final.get("success_ci"),
            "final_val_loss": final.get("val_loss"),
            "updates": self.step,
            "wall_clock_s": round(self.wall_clock_s, 2),
            "demo_episodes": len(self.store),
            "device": str(self.device),
            "run_dir": str(self.run_dir),
            "checkpoint": str(self.ckpt_root / ckpt),
        }
        return write_summary(self.run_dir, summary, self.eval_log.entries)


def train_bc(cfg: TrainConfig) -> Path:
    """Trains (or resumes) a BC run; returns the path of its summary.json."""
    run = BCRun(cfg)
    try:
        run.train()
        return run.finish(interrupted=False)
    except KeyboardInterrupt:  # in training or the final evaluation: a resumable checkpoint and the summary
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        return run.finish(interrupted=True)
