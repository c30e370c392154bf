"""The main job (`./dev train` defaults: PickCube, state, CPU profile) over several seeds, as a user runs it:
wall-clock includes demo collection; success is the final 50-episode evaluation."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from robot_rl.evaluation import bootstrap_ci, iqm


def main(seeds: tuple[int, ...] = (0, 1, 2, 3, 4), budget_s: float = 180.0) -> list[dict]:
    rows, success = [], []
    with tempfile.TemporaryDirectory() as d:
        for seed in seeds:
            run = Path(d) / f"s{seed}"
            t = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "robot_rl.cli", "train", f"seed={seed}", f"run_dir={run}"],
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            wall = time.perf_counter() - t
            s = json.loads((run / "summary.json").read_text())
            success.append(s["final_success_rate"])
            rows.append(
                {
                    "bench": f"main job seed {seed}",
                    "success": s["final_success_rate"],
                    "env_steps": s["env_steps"],
                    "train_wall_s": s["wall_clock_s"],
                    "process_wall_s": wall,
                    "intervention_rate": s["intervention_rate"],
                    "ok": s["final_success_rate"] >= 0.9 and wall <= budget_s,
                }
            )
    lo, hi = bootstrap_ci(success, iqm)
    rows.append(
        {
            "bench": f"main job over {len(seeds)} seeds",
            "success_iqm": iqm(success),
            "ci_low": lo,
            "ci_high": hi,
            "seeds_ok": sum(r["ok"] for r in rows),
            "goal": f">=90% in {budget_s:.0f} s",
        }
    )
    return rows
