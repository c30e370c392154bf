"""The main job on pixels (PickCube, front + wrist at 64 px, CPU): evaluation success over a wall-clock budget."""

from __future__ import annotations

import json
import tempfile

from robot_rl.cli import load_config
from robot_rl.loop.trainer import train


def main(minutes: float = 30.0) -> list[dict]:
    with tempfile.TemporaryDirectory() as d:
        cfg = load_config(
            [
                f"run_dir={d}",
                "obs=pixels",
                f"loop.max_minutes={minutes}",
                "loop.env_steps=1000000",
                "loop.eval_every=1000",
                "loop.eval_episodes=10",
                "loop.final_eval_episodes=20",
                "loop.checkpoint_every=0",
                "loop.stop_at_success=2",
            ]
        )
        summary = json.loads(train(cfg).read_text())
    rows = [
        {
            "bench": f"pixel run: eval at {e['env_steps']} env steps",
            "success": e["success_rate"],
            "mean_length": e["mean_length"],
        }
        for e in summary["evals"]
    ]
    rows.append(
        {
            "bench": f"pixel run: final after {summary['wall_clock_s'] / 60:.1f} min",
            "success": summary["final_success_rate"],
            "env_steps": summary["env_steps"],
            "updates": summary["updates"],
        }
    )
    return rows
