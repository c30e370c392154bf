"""Issue #6's acceptance runs: a deliberately weak diffusion base (few noisy scripted demos of PickCube), then
residual RL and DSRL on top of it, 3 seeds each, with success-vs-env-steps curves as a PNG.

The same commands are in the README; this only runs them in a row and collects the summaries. A finished run is kept
in `bench/results/steering/` with its parameters (`<run>.params.json`) and reused only when they match.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from common import record, reusable  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# 20 demos with expert noise 0.5 (wide action spread, which DSRL needs to steer), cloned for only 1500 steps.
BASE = ["algo=bc_diffusion", "demos.n_episodes=20", "demos.expert_noise=0.5", "bc.steps=1500", "bc.eval_every=500"]
RL = {
    "residual": ["algo=residual", "loop.env_steps=3000", "loop.eval_every=250"],
    "dsrl": ["algo=dsrl", "loop.env_steps=5000", "loop.eval_every=500"],  # agent steps = chunks of 4 env steps
}


def run(overrides: list[str], run_dir: Path, upstream: dict | None = None) -> dict:
    """A finished run's summary; the run is kept when it finished with the same overrides (and `upstream`, what
    it was built on), else trained again."""
    args = ["loop.final_eval_episodes=50", "loop.eval_episodes=20", "threads=1", *overrides]
    params = {"train": args, **(upstream or {})}
    if not (reusable(run_dir, params, f"the run {run_dir.name}") and (run_dir / "summary.json").exists()):
        shutil.rmtree(run_dir, ignore_errors=True)
        cmd = [sys.executable, "-m", "robot_rl.cli", "train", f"run_dir={run_dir}", *args]
        subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        record(run_dir, params)
    return json.loads((run_dir / "summary.json").read_text())


def main(quick: bool = False, out: Path = HERE / "results" / "steering") -> list[dict]:
    seeds = (0,) if quick else (0, 1, 2)
    base = run(BASE, out / "base")
    base_ckpt = base["checkpoint"]
    rows = [{"bench": "diffusion base (20 demos, noise 0.5, 1500 BC steps)", "success": base["final_success_rate"],
             "ci": base["final_success_ci"], "wall_s": base["wall_clock_s"]}]  # fmt: skip
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.axhline(base["final_success_rate"], color="k", ls="--", label="diffusion base")
    for (algo, overrides), color in zip(RL.items(), ("tab:blue", "tab:orange"), strict=True):
        for seed in seeds:
            s = run([*overrides, f"{algo}.base={base_ckpt}", f"seed={seed}"], out / f"{algo}_s{seed}", {"base": BASE})
            x = [0] + [e["sim_steps"] for e in s["evals"]]
            y = [base["final_success_rate"]] + [e["success_rate"] for e in s["evals"]]
            ax.plot(x, y, color=color, alpha=0.8, label=algo if seed == seeds[0] else None)
            rows.append({"bench": f"{algo} seed {seed}", "success": s["final_success_rate"],
                         "ci": s["final_success_ci"], "gain_points": 100 * (s["final_success_rate"] -
                         base["final_success_rate"]), "env_steps": s["sim_steps"], "agent_steps": s["env_steps"],
                         "wall_s": s["wall_clock_s"]})  # fmt: skip
    ax.set(xlabel="env steps", ylabel="eval success (20 episodes; last point 50)", ylim=(-0.02, 1.02),
           title="PickCube from a weak diffusion base")  # fmt: skip
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "curves.png", dpi=120)
    rows.append({"bench": "curves", "png": str(out / "curves.png")})
    return rows
