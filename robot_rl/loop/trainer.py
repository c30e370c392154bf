"""The main job in one process: demos -> actor/learner loop at a fixed UTD -> evaluation -> checkpoint.

The actor and learner only meet through `Learner.add(transition)` and `Learner.policy_weights()`; the ROS 2
nodes put a transport between exactly those two calls.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf
from safetensors.torch import load_file, save_file
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from robot_rl.algos.reward_classifier import (
    ClassifierReward,
    RewardClassifier,
    classifier_metrics,
    record_classifier_data,
    train_reward_classifier,
)
from robot_rl.algos.sac import SAC
from robot_rl.buffers import ReplayBuffer
from robot_rl.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from robot_rl.config import TrainConfig
from robot_rl.demos.collect import collect, episode_transitions
from robot_rl.demos.store import EpisodeStore
from robot_rl.evaluation import EvalResult, evaluate
from robot_rl.loop.actor import Actor
from robot_rl.loop.learner import Learner
from robot_rl.sim.envs import make_env
from robot_rl.sim.experts import ScriptedExpert, SimulatedHuman


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def default_run_dir(cfg: TrainConfig) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{cfg.env.task}-{cfg.env.obs}-s{cfg.seed}-{stamp}"


def obs_layout(env) -> tuple[int, tuple[str, ...], int]:
    """(state dim, camera keys, image size) from the env's Dict observation space."""
    space = env.observation_space
    cameras = tuple(k for k, s in space.spaces.items() if len(s.shape) == 3)
    size = space[cameras[0]].shape[0] if cameras else 0
    return space["state"].shape[0], cameras, size


@dataclass
class RunState:
    """Counters that survive a resume."""

    env_steps: int = 0
    updates: int = 0
    episodes: int = 0
    wall_clock_s: float = 0.0
    best_eval_success: float = 0.0


def prepare_demos(cfg: TrainConfig, run_dir: Path, env) -> EpisodeStore:
    """Opens the configured store, or collects scripted demos into the run's own (resumable) store."""
    if cfg.demos.path:
        return EpisodeStore(cfg.demos.path, mode="r")
    store = EpisodeStore(run_dir / "demos.zarr", mode="a")
    missing = cfg.demos.n_episodes - len(store)
    if missing > 0:
        expert = ScriptedExpert(noise_std=cfg.demos.expert_noise, seed=cfg.seed)
        first_seed = 10_000 * (cfg.seed + 1) + len(store)
        collect(env, expert.act, store, missing, source="scripted", task=cfg.env.task, seed=first_seed)
    return store


def make_reward_classifier(cfg: TrainConfig, run_dir: Path) -> RewardClassifier:
    """Loads `reward.classifier_path`, or trains one on scripted frames (success held after it happens)."""
    probe = make_env(cfg.env)
    state_dim, cameras, image_size = obs_layout(probe)
    clf = RewardClassifier(state_dim, cameras, image_size)
    if cfg.reward.classifier_path:
        clf.load_state_dict(load_file(cfg.reward.classifier_path))
        return clf.eval()
    holding = make_env(dataclasses.replace(cfg.env, terminate_on_success=False), seed=cfg.seed + 7)
    expert = ScriptedExpert(noise_std=cfg.demos.expert_noise, seed=cfg.seed + 7)
    data = record_classifier_data(holding, expert.act, episodes=max(cfg.demos.n_episodes, 10), seed=50_000)
    train_set, val_set = data.split(0.2, cfg.seed)
    train_reward_classifier(clf, train_set, cfg.reward.classifier_steps, seed=cfg.seed)
    metrics = classifier_metrics(clf, val_set, cfg.reward.threshold)
    print(f"reward classifier on held-out frames: {metrics}")
    save_file({k: v.contiguous() for k, v in clf.state_dict().items()}, str(run_dir / "reward_classifier.safetensors"))
    return clf


def train(cfg: TrainConfig) -> Path:
    """Runs (or resumes) one training run; returns the path of its summary.json."""
    torch.set_num_threads(cfg.threads or os.cpu_count() or 1)
    device = resolve_device(cfg.device)
    run_dir = Path(cfg.resume or cfg.run_dir or default_run_dir(cfg))
    run_dir.mkdir(parents=True, exist_ok=True)
    config_yaml = OmegaConf.to_yaml(OmegaConf.structured(cfg))
    (run_dir / "config.yaml").write_text(config_yaml)
    seed_everything(cfg.seed)

    env = make_env(cfg.env, seed=cfg.seed)
    eval_env = make_env(cfg.env, seed=cfg.seed + 1)
    if cfg.reward.source == "classifier":
        clf = make_reward_classifier(cfg, run_dir)
        # Success no longer ends training episodes: only the classifier's verdict does.
        env = ClassifierReward(
            make_env(dataclasses.replace(cfg.env, terminate_on_success=False), seed=cfg.seed), clf, cfg.reward.threshold
        )
    elif cfg.reward.source != "env":
        raise ValueError(f"reward.source={cfg.reward.source!r}; expected 'env' or 'classifier'")
    state_dim, cameras, image_size = obs_layout(env)
    obs_keys = ["state", *cameras]
    act_dim = env.action_space.shape[0]

    store = prepare_demos(cfg, run_dir, env)
    demo_buf = ReplayBuffer(cfg.loop.buffer_capacity, seed=cfg.seed)
    online_buf = ReplayBuffer(cfg.loop.buffer_capacity, seed=cfg.seed + 1)
    for i in range(len(store)):
        for t in episode_transitions(store, i, obs_keys):
            demo_buf.add(t)

    algo = SAC(cfg.sac, state_dim, act_dim, cameras, image_size)
    algo.policy.encoder.set_state_normalization(torch.from_numpy(demo_buf.obs["state"][demo_buf.valid]))
    algo = algo.to(device)
    learner = Learner(algo, demo_buf, online_buf, device, cfg.loop.learning_starts)
    human = SimulatedHuman(cfg.intervention, seed=cfg.seed)
    actor = Actor(env, copy.deepcopy(algo.policy).cpu(), human if cfg.intervention.enabled else None, cfg.seed)

    state = RunState()
    ckpt_root = run_dir / "checkpoints"
    ckpt = latest_checkpoint(ckpt_root) if cfg.resume else None
    if ckpt is not None:
        counters = load_checkpoint(ckpt, algo, algo.optimizers(), {"demo": demo_buf, "online": online_buf}, device)
        state = RunState(**counters)
        learner.env_steps, learner.updates = state.env_steps, state.updates
        online_buf.break_sequence()  # the interrupted episode is not continued
        demo_buf.break_sequence()
        actor.stats.episodes = state.episodes
        print(f"resumed {run_dir} from {ckpt.name}: {state.env_steps} env steps, {state.updates} updates")
    actor.load_weights(learner.policy_weights(), learner.updates)

    def checkpoint(name: str) -> None:
        state.env_steps, state.updates, state.episodes = learner.env_steps, learner.updates, actor.stats.episodes
        save_checkpoint(
            ckpt_root,
            name,
            algo,
            algo.optimizers(),
            vars(state),
            config_yaml,
            {"demo": demo_buf, "online": online_buf},
        )

    writer = SummaryWriter(str(run_dir / "tb"))
    eval_log: list[dict] = []

    def run_eval(episodes: int) -> EvalResult:
        res = evaluate(eval_env, actor.policy, episodes, seed=1_000_000 + 1000 * cfg.seed)
        eval_log.append({"env_steps": learner.env_steps, "updates": learner.updates, **res.as_dict()})
        for k in ("success_rate", "mean_return", "mean_length"):
            writer.add_scalar(f"eval/{k}", getattr(res, k), learner.env_steps)
        return res

    session_start = time.perf_counter()
    wall_before = state.wall_clock_s
    last_eval = float("nan")
    bar = tqdm(total=cfg.loop.env_steps, initial=learner.env_steps, desc="train", unit="step", mininterval=2.0)

    def out_of_time() -> bool:
        elapsed = wall_before + time.perf_counter() - session_start
        return cfg.loop.max_minutes > 0 and elapsed >= 60.0 * cfg.loop.max_minutes

    while learner.env_steps < cfg.loop.env_steps and not out_of_time():
        human.set_progress(learner.env_steps)
        learner.add(actor.step())
        learner.train_to_rate_limit()
        step = learner.env_steps
        if step % cfg.loop.sync_every == 0:
            actor.load_weights(learner.policy_weights(), learner.updates)
        bar.update(1)
        if step % cfg.loop.log_every == 0:
            for k, v in learner.last_stats.items():
                writer.add_scalar(f"train/{k}", v, step)
            writer.add_scalar("train/success_rate", actor.stats.success_rate, step)
            writer.add_scalar("train/intervention_rate", actor.stats.intervention_rate, step)
            bar.set_postfix(
                succ=f"{actor.stats.success_rate:.2f}",
                interv=f"{actor.stats.intervention_rate:.2f}",
                eval=f"{last_eval:.2f}",
                upd=learner.updates,
                refresh=False,
            )
        if cfg.loop.checkpoint_every and step % cfg.loop.checkpoint_every == 0:
            state.wall_clock_s = wall_before + time.perf_counter() - session_start
            checkpoint(f"step_{step:08d}")
        if cfg.loop.eval_every and step % cfg.loop.eval_every == 0:
            last_eval = run_eval(cfg.loop.eval_episodes).success_rate
            state.best_eval_success = max(state.best_eval_success, last_eval)
            if last_eval >= cfg.loop.stop_at_success:
                bar.write(f"eval success {last_eval:.2f} >= {cfg.loop.stop_at_success} at step {step}: stopping")
                break
    bar.close()

    final = run_eval(cfg.loop.final_eval_episodes)
    state.wall_clock_s = wall_before + time.perf_counter() - session_start
    checkpoint("final")
    writer.close()
    summary = {
        "task": cfg.env.task,
        "obs": cfg.env.obs,
        "seed": cfg.seed,
        "final_success_rate": final.success_rate,
        "final_success_ci": final.success_ci,
        "final_mean_length": final.mean_length,
        "env_steps": learner.env_steps,
        "updates": learner.updates,
        "critic_updates": learner.updates * cfg.sac.utd,
        "wall_clock_s": round(state.wall_clock_s, 2),
        "intervention_rate": actor.stats.intervened_steps / max(actor.stats.steps, 1),
        "demo_episodes": len(store),
        "device": str(device),
        "run_dir": str(run_dir),
        "checkpoint": str(ckpt_root / "final"),
        "evals": eval_log,
    }
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    print_eval_table(eval_log)
    return run_dir / "summary.json"


def print_eval_table(evals: list[dict]) -> None:
    print(f"{'env steps':>10} {'updates':>8} {'success':>8} {'95% CI':>13} {'return':>7} {'length':>7}")
    for e in evals:
        lo, hi = e["success_ci"]
        print(
            f"{e['env_steps']:>10} {e['updates']:>8} {e['success_rate']:>8.2f} {f'[{lo:.2f},{hi:.2f}]':>13} "
            f"{e['mean_return']:>7.2f} {e['mean_length']:>7.1f}"
        )
