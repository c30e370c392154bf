"""All benchmarks, one command: `.venv/bin/python bench/run.py [--quick] [--only sim,learner] [--pixel-minutes 30]`.

Prints one table and writes `bench/results/latest.json` (+ a timestamped copy and `latest.md`).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
AREAS = (
    "sim", "learner", "demos", "transport", "real", "dr_transfer", "main_job", "pixel_run", "vla", "maniskill",
    "steering", "steering_runs", "transfer", "robot_loop", "visual_transfer", "sim_to_robot",
)  # fmt: skip


def fmt(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)


def to_markdown(results: dict[str, list[dict]]) -> str:
    lines = ["| area | bench | measurements |", "|---|---|---|"]
    for area, rows in results.items():
        for r in rows:
            vals = ", ".join(f"{k}={fmt(v)}" for k, v in r.items() if k != "bench")
            lines.append(f"| {area} | {r['bench']} | {vals} |")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--only", default=",".join(AREAS), help=f"comma list of {AREAS}")
    p.add_argument("--quick", action="store_true", help="few repetitions: a smoke run, not numbers to quote")
    p.add_argument("--pixel-minutes", type=float, default=5.0, help="budget of the pixel training loop (0 skips it)")
    p.add_argument("--robot-loop-minutes", type=float, default=40.0, help="robot_loop: training wall clock, this call")
    p.add_argument("--sim-to-robot-checkpoint", type=Path, default=None,
                   help="sim_to_robot: the sim camera run to start from (default: train one, 15 min)")  # fmt: skip
    p.add_argument("--task", default="pick_cube", help="robot_loop: pick_cube | peg_insert (issue #29)")
    p.add_argument("--out", type=Path, default=HERE / "results")
    args = p.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    sys.path.insert(0, str(HERE))
    results: dict[str, list[dict]] = {}
    for area in args.only.split(","):
        if area not in AREAS:
            p.error(f"unknown area {area!r}; choose from {AREAS}")
        mod = importlib.import_module(f"bench_{area}")
        t = time.perf_counter()
        if area == "pixel_run":
            if args.pixel_minutes <= 0:
                continue
            results[area] = mod.main(minutes=args.pixel_minutes)
        elif area == "main_job":
            results[area] = mod.main(seeds=(0, 1) if args.quick else (0, 1, 2, 3, 4))
        elif area == "robot_loop":  # resumable: each call continues the run in bench/results/robot_loop
            results[area] = mod.main(quick=args.quick, minutes=args.robot_loop_minutes, task=args.task)
        elif area == "sim_to_robot":
            results[area] = mod.main(quick=args.quick, checkpoint=args.sim_to_robot_checkpoint)
        elif area == "demos":
            results[area] = mod.main(episodes=4, T=10, reps=1) if args.quick else mod.main()
        else:
            results[area] = mod.main(quick=args.quick)
        print(f"[{area}] {time.perf_counter() - t:.0f} s", file=sys.stderr)
    table = to_markdown(results)
    print(table)
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {
        "time": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "quick": args.quick,
    }
    doc = json.dumps({"meta": meta, "results": results}, indent=1)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for name in ("latest.json", f"{stamp}.json"):
        (args.out / name).write_text(doc)
    (args.out / "latest.md").write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
