"""What every training job shares (SAC and BC alike): the run dir and its resolved config, threads, seeds, device,
the run's demos, and the evaluation log and table."""

from __future__ import annotations

import json
import random
import sys
import time
import zipfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import torch
from omegaconf import OmegaConf

from robot_rl.config import TrainConfig
from robot_rl.demos.collect import CollectConfig, collect_to_store
from robot_rl.demos.store import EpisodeStore
from robot_rl.demos.teleop.scripted import ScriptedDevice
from robot_rl.envs import make_env
from robot_rl.evaluation import EvalResult, conclusive, evaluate, failures_to_miss
from robot_rl.hardware import fastest_threads, pick_device
from robot_rl.loop.checks import check_demo_store, check_run_dir
from robot_rl.loop.classifier import Refits, unpack_verdicts

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

    from robot_rl.loop.actor import EpisodeStats
    from robot_rl.loop.cells import Cell


def resolve_device(name: str) -> torch.device:
    """The device `device=` names (`auto`: CUDA where usable), said on stderr with why: a GPU box whose driver is
    too old for the installed torch would otherwise train on the CPU without a word."""
    device, why = pick_device(name)
    print(f"device: {device} ({why})", file=sys.stderr)
    return device


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def default_run_dir(cfg: TrainConfig) -> Path:
    """runs/<task>-<obs>-s<seed>-<time>, with -2, -3 ... when two runs start in the same second."""
    task = cfg.env.task.replace("/", "_")  # gymnasium ids like gym_hil/PandaPickCubeBase-v0: one folder
    if cfg.robot is not None:
        task += f"-robot_{cfg.robot.name}"
    base = Path("runs") / f"{task}-{cfg.env.obs}-s{cfg.seed}-{time.strftime('%Y%m%d-%H%M%S')}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def start_run(cfg: TrainConfig) -> tuple[Path, torch.device, str]:
    """What every training job does first: start-up checks, threads pinned, the run dir with its resolved
    config.yaml, seeds. Returns (run dir, device, that config's YAML for the checkpoints)."""
    check_run_dir(cfg)
    check_demo_store(cfg)
    torch.set_num_threads(cfg.threads or fastest_threads())
    run_dir = Path(cfg.resume or cfg.run_dir or default_run_dir(cfg))
    run_dir.mkdir(parents=True, exist_ok=True)
    config_yaml = OmegaConf.to_yaml(OmegaConf.structured(cfg))
    (run_dir / "config.yaml").write_text(config_yaml)
    seed_everything(cfg.seed)
    return run_dir, resolve_device(cfg.device), config_yaml


def prepare_demos(cfg: TrainConfig, run_dir: Path) -> EpisodeStore | None:
    """Opens the configured store, or collects scripted demos into the run's own (resumable) store. A robot run
    has no scripted expert (it needs the object's pose): its demos come from `demos.path` or there are none."""
    if cfg.demos.path:
        return EpisodeStore(cfg.demos.path, mode="r")
    if cfg.robot is not None:
        return None
    env = make_env(cfg.env, seed=cfg.seed)
    store = EpisodeStore(run_dir / "demos.zarr", mode="a")
    if len(store) < cfg.demos.n_episodes:  # a resumed run tops up, continuing after the stored seeds
        collect_cfg = CollectConfig(task=cfg.env.task, success_only=True, seed=10_000 * (cfg.seed + 1))
        device = ScriptedDevice(noise_std=cfg.demos.expert_noise, seed=cfg.seed)
        collect_to_store(collect_cfg, device, store, cfg.demos.n_episodes, env=env, progress=sys.stderr)
    return store


@dataclass
class RunState:
    """Counters that survive a resume."""

    env_steps: int = 0
    sim_steps: int = 0
    updates: int = 0
    episodes: int = 0
    wall_clock_s: float = 0.0  # the training loop's, evaluations included
    startup_s: float = 0.0  # every session's before its loop: env, demos, trunk pretraining (`loop.max_minutes`)
    best_eval_success: float = 0.0
    arm_s: dict[str, float] = field(default_factory=dict)  # a robot run's arm time by activity (`real.timing.ArmClock`)
    actor_arm_s: dict[str, dict[str, float]] = field(default_factory=dict)  # a learner node's: each actor's, so far

    @classmethod
    def of(cls, counters: dict) -> RunState:
        """The counters a checkpoint saved; one from before `arm_s` had only its evaluations' arm time."""
        known = {f.name for f in fields(cls)}
        state = cls(**{k: v for k, v in counters.items() if k in known})
        if "eval_robot_s" in counters:
            state.arm_s.setdefault("evaluation", counters["eval_robot_s"])
        return state


def probe_states(env: gym.Env, seed: int, episodes: int = 5) -> np.ndarray:
    """States visited by random actions: a normaliser for runs with no demos."""
    states = []
    env.action_space.seed(seed)
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed + 500_000 + ep)
        done = False
        while not done:
            states.append(obs["state"])
            obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
            done = terminated or truncated
    return np.stack(states)


class EvalLog:
    """Evaluation entries, also appended to `run_dir/evals.jsonl` as they happen, so a resumed run's summary
    has the whole curve. Entries past the checkpoint a run resumes from are dropped: that stretch is redone."""

    def __init__(self, run_dir: Path, resumed_updates: int | None) -> None:
        self.path = run_dir / "evals.jsonl"
        lines = self.path.read_text().splitlines() if resumed_updates is not None and self.path.exists() else []
        self.entries = [e for e in map(json.loads, filter(None, lines)) if e["updates"] <= resumed_updates]
        self.path.write_text("".join(json.dumps(e) + "\n" for e in self.entries))

    def add(self, entry: dict) -> None:
        self.entries.append(entry)
        with self.path.open("a") as f:
            f.write(json.dumps(entry) + "\n")


class Evaluations:
    """A run's evaluations: its cell's scenes, each time on the same episode seeds, logged to evals.jsonl and
    tensorboard. A run is judged by the last scene's result: the nominal scene's where the run randomises
    (`loop/trainer.py`)."""

    def __init__(self, cell: Cell, policy: torch.nn.Module, seed: int, log: EvalLog, writer: SummaryWriter) -> None:
        self.cell, self.policy, self.log, self.writer = cell, policy, log, writer
        self.goal = cell.cfg.loop.stop_at_success  # the success that ends the run, once confirmed (`confirms`)
        self.seed = 1_000_000 + 1000 * seed

    def run(
        self, weights: dict, counters: dict, state: RunState, episodes: int, minutes: float, confirm: bool = False,
        **extra: float,
    ) -> EvalResult | None:  # fmt: skip
        """Evaluates `weights` on as many of `episodes` as `minutes` of arm time allow (`Cell.eval_episodes`) and logs
        it under `counters` (env_steps first) and `extra`. `confirm`: all of `episodes`, on seeds of their own
        (`confirm_seed`), logged with `"confirm": true`. None where the cell has no env to evaluate in (a robot run's
        learner node: `robot-rl deploy` evaluates a checkpoint)."""
        if self.cell.eval_env is None:
            return None
        self.policy.load_state_dict(weights)
        seed = self.confirm_seed() if confirm else self.seed
        episodes = episodes if confirm else self.cell.eval_episodes(episodes, minutes)
        # A confirmation that can no longer hold the goal ends there: on a robot, the rest is arm time for nothing.
        stop = failures_to_miss(self.goal, episodes) if confirm else 0
        with self.cell.busy("evaluation"):
            scenes = {prefix: evaluate(env, self.policy, episodes, seed=seed, stop_at_failures=stop)
                      for prefix, env in self.cell.scenes().items()}  # fmt: skip
        results = {f"{scene}{k}": v for scene, r in scenes.items() for k, v in r.as_dict().items()}
        results |= self.cell.robot_minutes(state, counters["env_steps"])
        self.log.add({**counters, **results, **extra, **({"confirm": True} if confirm else {})})
        for scene, r in scenes.items():
            for k in ("success_rate", "mean_return", "mean_length"):
                self.writer.add_scalar(f"eval/{scene}{k}", getattr(r, k), counters["env_steps"])
        return list(scenes.values())[-1]

    def confirms(self, fresh: EvalResult | None, crossed: float, step: int, say: Callable[[str], None]) -> bool:
        """Whether `fresh`, the fresh-seed evaluation after a crossing of the goal (`crossed` at env step `step`),
        holds it; says so either way. Without one (`loop.confirm_episodes` 0, or no env to evaluate in) the crossing
        stands."""
        said = f"eval success {crossed:.2f} >= {self.goal} at step {step}"
        if fresh is None:
            say(f"{said}: stopping")
            return True
        (lo, hi), ok = fresh.success_ci, fresh.success_rate >= self.goal and fresh.conclusive
        aborted = f" ({fresh.aborted_episodes} aborted)" if fresh.aborted_episodes else ""
        say(f"{said}; on {fresh.episodes} fresh episodes{aborted} {fresh.success_rate:.2f} [{lo:.2f}, {hi:.2f}]: "
            + ("confirmed, stopping" if ok else "not confirmed, training on"))  # fmt: skip
        return ok

    def confirm_seed(self) -> int:
        """The first seed of the next confirmation: apart from the periodic evaluations' and each other's."""
        return self.seed + 5_000_000 + 100_000 * sum(1 for e in self.log.entries if e.get("confirm"))

    def changed(self, updates: int) -> bool:
        """Whether the learner has updated since the last evaluation: re-measuring the same weights on the same
        episode seeds repeats the result and, on a robot, spends arm time on it (a warm-up before `learning_starts`)."""
        return not self.log.entries or self.log.entries[-1]["updates"] != updates

    def final(self, result: EvalResult | None) -> dict:
        """summary.json's final evaluation; a randomised run's also under its randomisation (`final_*` are on the
        nominal scene)."""
        last = self.log.entries[-1] if result else {}
        randomized = {f"final_{k}_randomized": last.get(k) for k in ("success_rate", "success_ci", "mean_length")}
        return {
            "goal_reached": goal_reached(self.log.entries, self.goal),
            "final_success_rate": result.success_rate if result else None,
            "final_success_ci": result.success_ci if result else None,
            "final_mean_length": result.mean_length if result else None,
            **(randomized if len(self.cell.scenes()) > 1 else {}),
        }


def take_episodes(state: RunState, episodes: Iterable[dict], stats: EpisodeStats, refits: Refits | None) -> None:
    """A learner node's actors' episode summaries: the training success rate, each robot actor's arm time so far
    (into the run state, which checkpoints keep), and the person's verdicts on their frames for the run's refits
    (None: it does not refit)."""
    for e in episodes:
        stats.record(bool(e["success"]), int(e["length"]), int(e["interventions"]))
        if "arm_s" in e:
            state.actor_arm_s[e["actor_id"]] = e["arm_s"]
        if refits is not None and "verdicts" in e:
            try:
                refits.judged.extend(unpack_verdicts(e["verdicts"]))
            except (ValueError, KeyError, OSError, zipfile.BadZipFile) as err:  # one actor's bytes, not the run's end
                print(f"{e['actor_id']}: unreadable verdicts dropped with episode {e.get('episode')}: {err!r}",
                      file=sys.stderr)  # fmt: skip


def actor_counts(actors: Mapping[str, Any], updates: int) -> dict[str, dict]:
    """A learner's summary of its actors (a receiver's `actors`, each with `received`, `lost`, `policy_version`):
    transitions taken, lost, and the policy lag in updates."""
    return {
        a: {"transitions": s.received, "lost": s.lost, "policy_lag": updates - s.policy_version}
        for a, s in actors.items()
    }


def judged(entry: dict) -> tuple[float, list[float]]:
    """An evaluation entry's success rate and Wilson interval on the scene the run is judged by (the nominal one
    where the run randomises); nan where too few of its episodes were scored (`EvalResult.conclusive`)."""
    key = "nominal_" if "nominal_success_rate" in entry else ""
    if not conclusive(entry, key):
        return float("nan"), entry[f"{key}success_ci"]
    return entry[f"{key}success_rate"], entry[f"{key}success_ci"]


def goal_reached(evals: list[dict], goal: float) -> dict[str, dict | None]:
    """When the run first crossed `goal` (a periodic evaluation after step 0: step 0's is the starting policy) and
    when a fresh-seed confirmation first held it (None: never): env steps, success, its Wilson interval, episodes,
    and on a robot the arm's minutes whole by then."""

    def point(e: dict | None) -> dict | None:
        if e is None:
            return None
        rate, ci = judged(e)
        arm = {"robot_minutes_whole": e["robot_minutes_whole"]} if "robot_minutes_whole" in e else {}
        return {"env_steps": e["env_steps"], "success_rate": rate, "success_ci": ci, "episodes": e["episodes"], **arm}

    crossed = next((e for e in evals if not e.get("confirm") and e["env_steps"] > 0 and judged(e)[0] >= goal), None)
    confirmed = next((e for e in evals if e.get("confirm") and judged(e)[0] >= goal), None)
    return {"goal": goal, "first_crossing": point(crossed), "confirmed": point(confirmed)}


def write_summary(run_dir: Path, summary: dict, evals: list[dict]) -> Path:
    """summary.json (with the evaluation history), the evaluation table, and for an interrupted run how to go on."""
    path = run_dir / "summary.json"
    path.write_text(json.dumps({**summary, "evals": evals}, indent=1))
    print_eval_table(evals)
    if summary["status"] == "interrupted":
        print(f"interrupted at {summary['updates']} updates: saved {summary['checkpoint']} and {path}; continue with: "
              f"robot-rl train resume={run_dir}", file=sys.stderr)  # fmt: skip
    return path


def reward_source(cfg: TrainConfig) -> str:
    """Where a run's reward comes from: the sim's own check, a robot's success topic, or a classifier (whose
    threshold and held-out rates are saved with it), and whose keys override it."""
    keys = ""
    if cfg.keys_count:
        simulated = cfg.intervention.device == "simulated"
        keys = " + the simulated operator's keys (the sim's success topic)" if simulated else " + operator keys"
    if cfg.reward.source == "classifier":
        return "classifier" + keys
    return f"{cfg.robot.success_topic} topic{keys}" if cfg.robot is not None else cfg.reward.source


def operator_name(cfg: TrainConfig) -> str | None:
    """Who intervened: nobody (None), `oracle` (the sim's simulated human, or the simulated operator reading the
    simulator's state), `person` (the simulated operator with a person's limits) or the device a person held."""
    c = cfg.intervention
    if not c.enabled:
        return None
    return c.operator if c.device in ("", "simulated") else c.device


def success_judge(cfg: TrainConfig) -> str:
    """What a robot run's evaluations count as success: its success topic, else the run's classifier."""
    topic = cfg.robot.success_topic
    return f"{topic} {'button' if cfg.robot.success_event else 'topic'}" if topic else "classifier"


def print_eval_table(evals: list[dict]) -> None:
    """One line per evaluation; a randomised run's success on the nominal scene (what it is judged by) at the end."""
    nominal = any("nominal_success_rate" in e for e in evals)
    print(f"{'env steps':>10} {'updates':>8} {'success':>8} {'95% CI':>13} {'return':>7} {'length':>7}"
          + (f" {'nominal':>8}" if nominal else ""))  # fmt: skip
    for e in evals:
        lo, hi = e["success_ci"]
        print(
            f"{e['env_steps']:>10} {e['updates']:>8} {e['success_rate']:>8.2f} {f'[{lo:.2f},{hi:.2f}]':>13} "
            f"{e['mean_return']:>7.2f} {e['mean_length']:>7.1f}"
            + (f" {e['nominal_success_rate']:>8.2f}" if nominal else "")
            + ("  fresh seeds: a confirmation" if e.get("confirm") else "")
        )
