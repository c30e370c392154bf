"""Deterministic evaluation rollouts and the statistics that make a few seeds honest (IQM, bootstrap CIs)."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import gymnasium as gym
import numpy as np

from robot_rl.policies.base import Policy
from robot_rl.types import EpisodeAborted

if TYPE_CHECKING:
    from robot_rl.checkpoint import Checkpoint

log = logging.getLogger("robot_rl.evaluation")


@dataclass
class EvalResult:
    success_rate: float
    success_ci: tuple[float, float]  # Wilson 95 %: a bootstrap of 10 successes in 10 says [1, 1]
    mean_return: float
    mean_length: float  # steps per episode
    mean_success_length: float  # cycle time of successful episodes, in steps (nan if none)
    episodes: int
    # Contact honesty (MuJoCo tasks; nan where the env does not report them): the largest per-episode peak net
    # force on the gripper and its median, the deepest object penetration, and the fraction of episodes ended by
    # the force limit (sim/contacts.py, EnvConfig.ee_force_limit).
    peak_ee_force_max: float = float("nan")  # N
    peak_ee_force_median: float = float("nan")  # N
    peak_contact_force_max: float = float("nan")  # N
    max_penetration: float = float("nan")  # m
    safety_failure_rate: float = 0.0
    # Episodes given up after `reruns` re-runs, each aborted by a stop the policy did not cause (e-stop, a driver's
    # fault, silence): reported, not scored (deploy's `aborted_episodes` counts the same stops, without re-runs).
    aborted_episodes: int = 0

    @property
    def conclusive(self) -> bool:
        """At least half the episodes asked for were scored: a rate over the few that a stopping robot let through
        ends no run (a crossing of the goal and its confirmation must each be conclusive)."""
        return conclusive(self.as_dict())

    def as_dict(self) -> dict:
        return asdict(self)


def conclusive(result: dict, prefix: str = "") -> bool:
    """`EvalResult.conclusive` of a logged result (a scene's keys carry its `prefix`)."""
    scored = result[f"{prefix}episodes"]
    return scored > 0 and scored >= result.get(f"{prefix}aborted_episodes", 0)


@dataclass
class Rollout:
    success: bool
    episode_return: float
    length: int
    steps: dict[str, list] = dataclasses.field(default_factory=dict)  # per-step obs/action/reward when recorded
    peak_ee_force: float = float("nan")  # N; nan where the env does not report it
    peak_contact_force: float = float("nan")  # N
    max_penetration: float = float("nan")  # m
    safety_failure: bool = False


def rollout(env: gym.Env, policy: Policy, seed: int, record: bool = False) -> Rollout:
    """One episode of the policy's mean action, no human."""
    obs, _ = env.reset(seed=seed)
    policy.reset()
    out = Rollout(False, 0.0, 0)
    done = False
    while not done:
        action = policy.select_action(obs, deterministic=True)
        if record:
            for k, v in {**obs, "action": action}.items():
                out.steps.setdefault(k, []).append(v)
        obs, reward, terminated, truncated, info = env.step(action)
        if record:
            out.steps.setdefault("reward", []).append(np.float32(reward))
        out.episode_return += float(reward)
        out.length += 1
        done = terminated or truncated
    out.success = bool(info["success"])
    out.peak_ee_force = float(info.get("peak_ee_force", np.nan))
    out.peak_contact_force = float(info.get("peak_contact_force", np.nan))
    out.max_penetration = float(info.get("max_penetration", np.nan))
    out.safety_failure = bool(info.get("safety_failure", False))
    return out


def _stat(fn, x: list[float]) -> float:
    """`fn` of the reported values; nan where there are none (an env that does not report them, no episode scored)."""
    x = [v for v in x if not np.isnan(v)]
    return float(fn(x)) if x else float("nan")


def summarize(rollouts: Sequence[Rollout]) -> EvalResult:
    s = np.array([r.success for r in rollouts], dtype=float)
    ok_lengths = [r.length for r in rollouts if r.success]
    return EvalResult(
        success_rate=_stat(np.mean, s),
        success_ci=wilson(int(s.sum()), len(s)),
        mean_return=_stat(np.mean, [r.episode_return for r in rollouts]),
        mean_length=_stat(np.mean, [r.length for r in rollouts]),
        mean_success_length=float(np.mean(ok_lengths)) if ok_lengths else float("nan"),
        episodes=len(rollouts),
        peak_ee_force_max=_stat(np.max, [r.peak_ee_force for r in rollouts]),
        peak_ee_force_median=_stat(np.median, [r.peak_ee_force for r in rollouts]),
        peak_contact_force_max=_stat(np.max, [r.peak_contact_force for r in rollouts]),
        max_penetration=_stat(np.max, [r.max_penetration for r in rollouts]),
        safety_failure_rate=_stat(np.mean, [float(r.safety_failure) for r in rollouts]),
    )


def evaluate(
    env: gym.Env, policy: Policy, episodes: int, seed: int = 1_000_000, retry_s: float = 1.0, reruns: int = 3,
    stop_at_failures: int = 0,
) -> EvalResult:  # fmt: skip
    """Seeds are disjoint from training resets. A stop the policy caused ends its episode as a terminal step
    (`info["safety_failure"]`): a failed episode and a safety failure. One it did not cause (`EpisodeAborted`: an
    e-stop, a driver's fault, silence) is no verdict on the policy: the episode is run again with its seed after
    `retry_s`, at most `reruns` times, then given up and counted in `aborted_episodes`, so a robot that keeps
    stopping cannot hold the evaluation forever. `stop_at_failures` (0: never): the evaluation ends at that many
    failed episodes, where its verdict can no longer change (a confirmation of the goal; `failures_to_miss`)."""
    results, given_up = [], 0
    for ep in range(episodes):
        if stop_at_failures and sum(not r.success for r in results) >= stop_at_failures:
            break
        for attempt in range(reruns + 1):
            try:
                results.append(rollout(env, policy, seed + ep))
                break
            except EpisodeAborted as e:
                log.warning("evaluation episode %d aborted (try %d of %d): %s", ep, attempt + 1, reruns + 1, e)
                stop = f"{type(e).__name__}: {e}"
                time.sleep(retry_s)
        else:
            given_up += 1
            print(f"evaluation: gave up on episode {ep} (seed {seed + ep}) after {reruns + 1} aborted tries, the "
                  f"last by {stop}", file=sys.stderr)  # fmt: skip
    return dataclasses.replace(summarize(results), aborted_episodes=given_up)


def failures_to_miss(goal: float, episodes: int) -> int:
    """The failed episodes after which a success rate over `episodes` can no longer reach `goal`."""
    return episodes - math.ceil(goal * episodes - 1e-9) + 1


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of `k` successes in `n` episodes (95 % at the default `z`); NaNs for none."""
    if n == 0:
        return (float("nan"), float("nan"))
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def iqm(x: Sequence[float] | np.ndarray) -> float:
    """Interquartile mean (Agarwal et al. 2021): robust to one lucky or broken seed, less noisy than median."""
    x = np.sort(np.asarray(x, dtype=float))
    n = len(x)
    if n == 0:
        return float("nan")
    lo, hi = int(np.floor(0.25 * n)), int(np.ceil(0.75 * n))
    return float(x[lo:hi].mean()) if hi > lo else float(x.mean())


def bootstrap_ci(
    x: Sequence[float] | np.ndarray, stat=np.mean, n_boot: int = 2000, alpha: float = 0.05, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of `stat` over the samples in `x`."""
    x = np.asarray(x, dtype=float)
    if len(x) == 0:
        return (float("nan"), float("nan"))
    rng = np.random.default_rng(seed)
    stats = np.array([stat(x[rng.integers(0, len(x), len(x))]) for _ in range(n_boot)])
    return (float(np.quantile(stats, alpha / 2)), float(np.quantile(stats, 1 - alpha / 2)))


def finished_runs(run_dirs: Sequence[Path]) -> list[Path]:
    """The run dirs whose training finished; each other one gets a note on stderr (a glob like runs/* catches
    killed, interrupted and failed-to-start runs too)."""
    from robot_rl.errors import UserError

    finished, skipped = [], []
    for d in map(Path, run_dirs):
        summary = d / "summary.json"
        status = json.loads(summary.read_text()).get("status", "finished") if summary.is_file() else "unfinished"
        (finished if status == "finished" else skipped).append((d, status))
    if not finished:
        why = ", ".join(f"{d}: {status}" for d, status in skipped)
        raise UserError(f"none of the {len(skipped)} run dir(s) holds a finished run ({why})")
    for d, status in skipped:
        print(f"note: skipping {d}: {status} (no final evaluation)", file=sys.stderr)
    return [d for d, _ in finished]


def aggregate_runs(run_dirs: Sequence[Path]) -> dict:
    """Across seeds: IQM and bootstrap CI of final success, plus mean wall-clock and env steps."""
    summaries = [json.loads((Path(d) / "summary.json").read_text()) for d in run_dirs]
    success = [s["final_success_rate"] for s in summaries]
    return {
        "runs": [str(d) for d in run_dirs],
        "task": sorted({s["task"] for s in summaries}),
        "success_iqm": iqm(success),
        "success_ci": bootstrap_ci(success, iqm),
        "success_per_run": success,
        "wall_clock_s_mean": float(np.mean([s["wall_clock_s"] for s in summaries])),
        "env_steps_mean": float(np.mean([s["env_steps"] for s in summaries])),
    }


class BlankCameras(gym.ObservationWrapper):
    """These cameras' frames come black: what a policy does with one camera gone shows how much it relies on it (a
    policy that reads only its wrist camera loses nothing when the front one moves, and everything when it fails)."""

    def __init__(self, env: gym.Env, cameras: Sequence[str]) -> None:
        super().__init__(env)
        unknown = sorted(set(cameras) - set(env.observation_space.spaces))
        if unknown:
            from robot_rl.errors import UserError

            raise UserError(f"cannot blank {unknown}: the policy observes {sorted(env.observation_space.spaces)}")
        self.cameras = tuple(cameras)

    def observation(self, obs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {k: np.zeros_like(v) if k in self.cameras else v for k, v in obs.items()}


def evaluate_checkpoint(ckpt: Checkpoint, episodes: int, video_dir: Path | None = None, seed: int = 2_000_000,
                        nominal: bool = False, blank: Sequence[str] = ()) -> dict:  # fmt: skip
    """Runs a checkpoint's policy in its task, under its training randomisation or (`nominal`) none, with the
    `blank` cameras black, and, with `video_dir`, writes one mp4 per episode (cameras side by side with the
    step/action/reward overlay of `robot-rl replay`: what the policy saw)."""
    from robot_rl.demos.replay import compose_frames, write_video
    from robot_rl.envs import make_env
    from robot_rl.loop.adapters import agent_env
    from robot_rl.sim import config as sim_config

    cfg = ckpt.cfg
    if cfg.robot is not None:
        from robot_rl.errors import UserError

        name = cfg.robot.name
        raise UserError(f"{ckpt.path} was trained on robot={name}, whose observations a sim task does not make: "
                        f"evaluate it there, `robot-rl deploy {ckpt.path} --robot {name} --episodes N`")  # fmt: skip
    if nominal:
        cfg = dataclasses.replace(
            cfg, env=dataclasses.replace(cfg.env, randomization=sim_config.nominal(cfg.env.randomization))
        )
    env_cfg = cfg.env
    if video_dir and cfg.env.obs == "state":  # cameras for the video only; the policy reads `state`
        env_cfg = dataclasses.replace(cfg.env, obs="both", image_size=max(cfg.env.image_size, 128))
    env = agent_env(cfg, make_env(env_cfg))
    if blank:
        env = BlankCameras(env, blank)
    policy = ckpt.policy()
    rollouts = []
    for ep in range(episodes):
        r = rollout(env, policy, seed + ep, record=video_dir is not None)
        rollouts.append(r)
        if video_dir is not None:
            frames = {k: np.stack(v) for k, v in r.steps.items()}
            frames["intervened"] = np.zeros(r.length, bool)
            write_video(compose_frames(frames), Path(video_dir) / f"episode_{ep:03d}.mp4", fps=cfg.env.control_hz)
    env.close()
    res = summarize(rollouts)
    summary = {
        "checkpoint": str(ckpt.path),
        "task": cfg.env.task,
        "randomization": "nominal" if nominal else "as trained",
        "blanked_cameras": list(blank),
        "episodes": episodes,
        "success_rate": res.success_rate,
        "success_ci": res.success_ci,
        "mean_cycle_steps": res.mean_success_length,
        "cycle_time_s": res.mean_success_length / cfg.env.control_hz,
        "peak_ee_force_max": res.peak_ee_force_max,
        "max_penetration": res.max_penetration,
        "safety_failure_rate": res.safety_failure_rate,
        "per_episode": [
            {
                "episode": i,
                "success": r.success,
                "return": r.episode_return,
                "length": r.length,
                "peak_ee_force": r.peak_ee_force,
                "max_penetration": r.max_penetration,
                "safety_failure": r.safety_failure,
            }
            for i, r in enumerate(rollouts)
        ],  # fmt: skip
    }
    if video_dir is not None:
        Path(video_dir).mkdir(parents=True, exist_ok=True)
        (Path(video_dir) / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary


def camera_reliance(ckpt: Checkpoint, episodes: int, seed: int = 2_000_000, nominal: bool = False) -> list[dict]:
    """Success with all cameras, then with each one blanked in turn, on the same episodes: how much each carries."""
    cameras = ckpt.layouts["policy"].cameras
    if not cameras:
        from robot_rl.errors import UserError

        raise UserError(f"{ckpt.path}: the policy observes no camera (obs=state), so there is none to blank")
    rows = []
    for blank in ((), *((c,) for c in cameras)):
        r = evaluate_checkpoint(ckpt, episodes, seed=seed, nominal=nominal, blank=blank)
        rows.append({"blanked": blank[0] if blank else "none", "success_rate": r["success_rate"],
                     "success_ci": r["success_ci"]})  # fmt: skip
    full = rows[0]["success_rate"]
    for row in rows:
        row["kept"] = row["success_rate"] / full if full else float("nan")
    return rows
