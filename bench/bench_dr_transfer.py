"""Sim-to-real rehearsal (issue #5, acceptance 3): does a checkpoint keep its success when the robot is not the sim?

Trains (or takes) two PickCube checkpoints, one with `randomization=none` and one with `randomization=robust`
(configs/randomization/; trained as the held-out suite, bench_transfer.py, trains them), and measures each four
ways:

- `env`: in-process rollouts in the sim env, nominal vs `EnvConfig.randomization` pinned to the shift below;
- `dds`: `robot-rl deploy` against `robot-rl sim-robot` as separate processes over the pip-only DDS backend (the
  acceptance's set-up), the sim robot started nominal vs with the shift as command-line flags.

The shift: friction x0.75, cube mass x1.25, arm damping x1.2, +1 control period of command latency (the sim robot
gets it in seconds, `1 / control_hz`; the env in control steps) and a camera pose jitter of 2 cm / 0.05 rad (moot for
a state policy: it reads no camera). Episode seeds are the ones `robot-rl eval` and `deploy` use, so the four cells
of a checkpoint see the same scenes. Success CIs are Wilson 95 %; "kept" is shifted / nominal success with a
bootstrap 95 % CI.

Run: `.venv/bin/python bench/bench_dr_transfer.py [--episodes 40] [--checkpoints NO_DR DR] [--threads 1]`; writes
`bench/results/dr_transfer.json` and `.md`. Also `bench/run.py --only dr_transfer`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from bench_transfer import PRESET_LOOP, train
from common import episodes as per_episode
from common import kept_ci, wilson

os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")  # inherited by the node processes (as tests/)
HERE = Path(__file__).resolve().parent
SEED = 2_000_000  # first episode seed, as `robot-rl eval` and `robot-rl deploy` use
SHIFT = {"friction": 0.75, "mass": 1.25, "damping": 1.2, "latency_periods": 1, "camera_pos_m": 0.02,
         "camera_rot_rad": 0.05}  # fmt: skip


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "robot_rl.cli", *args]


def env_successes(ckpt: Path, shifted: bool, episodes: int) -> list[bool]:
    """In-process rollouts; the checkpoint's own training randomisation is replaced by nominal or the shift."""
    from robot_rl.checkpoint import Checkpoint
    from robot_rl.envs import make_env
    from robot_rl.evaluation import rollout
    from robot_rl.sim.config import nominal

    checkpoint = Checkpoint(ckpt)
    policy, cfg = checkpoint.policy(), checkpoint.cfg
    # Only the observation layout carries over from training; the dynamics are nominal or the shift.
    rand = nominal(cfg.env.randomization)
    if shifted:
        f, m, d = SHIFT["friction"], SHIFT["mass"], SHIFT["damping"]
        rand = dataclasses.replace(
            rand, friction_scale=(f, f), mass_scale=(m, m), damping_scale=(d, d),
            action_latency=SHIFT["latency_periods"], camera_pos_jitter=SHIFT["camera_pos_m"],
            camera_rot_jitter=SHIFT["camera_rot_rad"],
        )  # fmt: skip
    env = make_env(dataclasses.replace(cfg.env, randomization=rand))
    try:
        return [rollout(env, policy, SEED + ep).success for ep in range(episodes)]
    finally:
        env.close()


def sim_robot_args(cfg, shifted: bool) -> list[str]:
    args = []
    if cfg.env.obs != "state":
        args += ["--cameras", ",".join(cfg.env.cameras), "--image-size", str(cfg.env.image_size),
                 "--camera-hz", str(cfg.env.control_hz)]  # fmt: skip
    if shifted:
        f, m, d = (str(SHIFT[k]) for k in ("friction", "mass", "damping"))
        args += ["--friction", f, f, "--mass", m, m, "--damping", d, d,
                 "--latency", str(SHIFT["latency_periods"] / cfg.env.control_hz),
                 "--camera-jitter", str(SHIFT["camera_pos_m"]), str(SHIFT["camera_rot_rad"])]  # fmt: skip
    return args


def dds_successes(ckpt: Path, shifted: bool, episodes: int) -> tuple[list[bool], dict]:
    """`robot-rl deploy` against `robot-rl sim-robot`, two processes on a random loopback DDS domain."""
    from robot_rl.checkpoint import Checkpoint

    cfg = Checkpoint(ckpt).cfg
    domain = str(random.randint(1, 200))
    sim = subprocess.Popen(_cli("sim-robot", "--domain", domain, *sim_robot_args(cfg, shifted)),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        out = subprocess.run(_cli("deploy", str(ckpt), "--robot", "sim", "--domain", domain, "--episodes",
                                  str(episodes), "--seed", str(SEED), "--quiet", "--robot-set", "reset_timeout_s=60"),
                             capture_output=True, text=True, timeout=60 + 30 * episodes, check=True)  # fmt: skip
    finally:
        sim.terminate()
        sim.wait()
    summary = json.loads(out.stdout)
    extra = {k: summary[k] for k in ("aborted_episodes", "safety_holds", "mean_cycle_steps")}
    extra["deadline_misses"] = summary["control"]["deadline_misses"]
    return [r["success"] for r in summary["per_episode"]], extra


def measure(name: str, ckpt: Path, episodes: int) -> list[dict]:
    rows = []
    for setup in ("env", "dds"):
        got: dict[str, list[bool]] = {}
        for cond in ("nominal", "shifted"):
            extra: dict = {}
            if setup == "env":
                got[cond] = env_successes(ckpt, cond == "shifted", episodes)
            else:
                got[cond], extra = dds_successes(ckpt, cond == "shifted", episodes)
            k, n = sum(got[cond]), len(got[cond])
            lo, hi = wilson(k, n)
            rows.append({"bench": f"{name} {setup} {cond}", "checkpoint": name, "setup": setup, "condition": cond,
                         "episodes": n, "successes": k, "success": k / n, "ci_lo": lo, "ci_hi": hi,
                         **extra, "per_episode": per_episode(got[cond], SEED)})  # fmt: skip
            print(f"  {rows[-1]['bench']}: {k}/{n} = {k / n:.2f} [{lo:.2f}, {hi:.2f}]", file=sys.stderr, flush=True)
        kept = np.mean(got["shifted"]) / max(np.mean(got["nominal"]), 1e-9)
        lo, hi = kept_ci(got["nominal"], got["shifted"])
        rows[-1].update({"kept": float(kept), "kept_ci_lo": lo, "kept_ci_hi": hi})
    return rows


def to_markdown(rows: list[dict]) -> str:
    lines = [f"shift: {SHIFT}", "", "| checkpoint | setup | nominal success [95 % CI] | shifted success [95 % CI] | "
             "kept (shifted / nominal) [95 % CI] | episodes |", "|---|---|---|---|---|---|"]  # fmt: skip
    for nom, sh in zip(rows[::2], rows[1::2], strict=True):
        lines.append(
            f"| {nom['checkpoint']} | {nom['setup']} | {nom['success']:.2f} [{nom['ci_lo']:.2f}, {nom['ci_hi']:.2f}]"
            f" | {sh['success']:.2f} [{sh['ci_lo']:.2f}, {sh['ci_hi']:.2f}] | {sh['kept']:.2f} "
            f"[{sh['kept_ci_lo']:.2f}, {sh['kept_ci_hi']:.2f}] | {nom['episodes']} + {sh['episodes']} |"
        )
    return "\n".join(lines)


def main(quick: bool = False, episodes: int = 0, checkpoints: list[Path] | None = None, threads: int = 0,
         out: Path | None = None) -> list[dict]:  # fmt: skip
    episodes = episodes or (10 if quick else 40)
    with tempfile.TemporaryDirectory(prefix="dr_transfer_") as tmp:
        if not checkpoints:
            # The suite's training (bench_transfer.py): the main job, `robust` with its longer budget.
            runs = [train(Path(tmp) / p, "PickCube", p, 0, threads, PRESET_LOOP.get(p, ())) for p in ("none", "robust")]
            checkpoints = [run / "checkpoints" / "final" for run in runs]
        rows = []
        for name, ckpt in zip(("no DR", "DR robust"), checkpoints, strict=True):
            rows += measure(name, ckpt, episodes)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        doc = {"shift": SHIFT, "checkpoints": [str(c) for c in checkpoints], "rows": rows}
        (out / "dr_transfer.json").write_text(json.dumps(doc, indent=1))
        (out / "dr_transfer.md").write_text(to_markdown(rows) + "\n")
    return rows


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--episodes", type=int, default=40)
    p.add_argument(
        "--checkpoints",
        type=Path,
        nargs=2,
        default=None,
        metavar=("NO_DR", "DR"),
        help="measure these instead of training both (a no-DR and a DR checkpoint, in that order)",
    )
    p.add_argument("--threads", type=int, default=0, help="torch threads of the training runs (0: one per core)")
    p.add_argument("--out", type=Path, default=HERE / "results")
    a = p.parse_args()
    result = main(episodes=a.episodes, checkpoints=a.checkpoints, threads=a.threads, out=a.out)
    print(to_markdown(result))
