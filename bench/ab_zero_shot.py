"""The sim-to-robot bench's zero-shot stage alone, for an A/B between two trees: `deploy` of one sim camera checkpoint
on the stand-in cell (real time), 20 episodes per seed on seeds 0 and 1, by the robot_rl of the tree it runs in.

Run it from each tree's root with that tree's interpreter, on the same checkpoint (one `train_sim` run):
`.venv/bin/python <this file> RUN_DIR OUT.json`. The file records the tree's commit beside the outcomes, so a
refactor's "behaviour unchanged" is two files a stranger can compare (bench/results/sim_to_robot/)."""

import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

tree = Path.cwd()
sys.path.insert(0, str(tree / "bench"))
import bench_sim_to_robot as b  # noqa: E402  (the tree's own bench, whatever its version)


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(tree), *args], capture_output=True, text=True).stdout.strip()


def main(ckpt: Path, out: Path) -> None:
    t0 = time.time()
    rows = {seed: b.zero_shot(ckpt, seed, 20) for seed in (0, 1)}
    doc = {
        "area": "sim_to_robot", "stage": "zero_shot", "checkpoint": str(ckpt),
        "robot_rl_commit": git("rev-parse", "HEAD"),
        "robot_rl_dirty": bool(git("status", "--porcelain")), "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(), "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t0)),
        "duration_s": round(time.time() - t0, 1),
        "rows": [{"seed": s, "success_rate": r["deploy"]["success_rate"], "episodes": r["deploy"]["episodes"],
                  "robot_s": r["robot_s"]} for s, r in rows.items()],
        "raw": {str(s): [{"episode": e["episode"], "success": e["success"], "steps": e["steps"]}
                         for e in r["deploy"]["per_episode"]] for s, r in rows.items()},
    }  # fmt: skip
    out.write_text(json.dumps(doc, indent=1))
    print(json.dumps(doc["rows"]))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
