"""All benchmarks, one command: `.venv/bin/python bench/run.py [--quick] [--only sim,learner] [--pixel-minutes 30]`.

Prints one table and writes, for each area run, `bench/results/<area>/<run>.json` (`common.write_run`: parameters,
versions, commit, box, rows, raw per-episode outcomes), `<run>` = start time + `--tag` (default `quick` or `full`);
the table alone also goes to `bench/results/latest.md` (not committed).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
AREAS = (
    "sim", "learner", "demos", "transport", "real", "dr_transfer", "main_job", "pixel_run", "vla", "maniskill",
    "steering", "steering_runs", "transfer", "robot_loop", "visual_transfer", "sim_to_robot", "fleet",
    "fleet_robots",
)  # fmt: skip


def fmt(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)


def to_markdown(results: dict[str, list[dict]]) -> str:
    lines = ["| area | bench | measurements |", "|---|---|---|"]
    for area, rows in results.items():
        for r in rows:
            # `drawn`: a fresh cell's values (visual_transfer), in the run file only
            hidden = ("bench", "per_episode", "curve", "drawn")
            vals = ", ".join(f"{k}={fmt(v)}" for k, v in r.items() if k not in hidden)
            lines.append(f"| {area} | {r['bench']} | {vals} |")
    return "\n".join(lines)


def area_kwargs(area: str, args: argparse.Namespace) -> dict:
    """The arguments `bench_<area>.main` is called with (recorded in its run file)."""
    if area == "pixel_run":
        return {"minutes": args.pixel_minutes}
    if area == "main_job":
        return {"seeds": (0, 1) if args.quick else (0, 1, 2, 3, 4)}
    if area == "robot_loop":  # resumable: each call continues the run in bench/results/robot_loop
        return {
            "quick": args.quick,
            "minutes": args.robot_loop_minutes,
            "task": args.task,
            "operator": args.operator,
            "robots": args.robots,
            "realtime": args.realtime,
        }
    if area == "fleet_robots":  # resumable: each call continues the fleets in bench/results/fleet_robots
        return {
            "quick": args.quick,
            "minutes": args.fleet_minutes,
            "robots": args.fleet_robots,
            "seeds": args.fleet_seeds,
            "realtime": args.realtime,
        }
    if area == "sim_to_robot":
        return {"quick": args.quick, "checkpoint": args.sim_to_robot_checkpoint,
                "cells_seed": args.sim_to_robot_cells_seed, "minutes": args.sim_to_robot_minutes,
                "only": args.sim_to_robot_cells}  # fmt: skip
    if area == "demos":
        return {"episodes": 4, "T": 10, "reps": 1} if args.quick else {}
    return {"quick": args.quick}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--only", default=",".join(AREAS), help=f"comma list of {AREAS}")
    p.add_argument("--quick", action="store_true", help="few repetitions: a smoke run, not numbers to quote")
    p.add_argument("--pixel-minutes", type=float, default=5.0, help="budget of the pixel training loop (0 skips it)")
    p.add_argument("--robot-loop-minutes", type=float, default=40.0, help="robot_loop: training wall clock, this call")
    p.add_argument("--fleet-minutes", type=float, default=240.0, help="fleet_robots: wall clock of this call")
    p.add_argument("--fleet-robots", default="1,2,4", help="fleet_robots: comma list of fleet sizes")
    p.add_argument("--fleet-seeds", default="0,1", help="fleet_robots: comma list of training seeds")
    p.add_argument("--sim-to-robot-checkpoint", type=Path, default=None,
                   help="sim_to_robot: the sim camera run to start from (default: train one, <= 30 min)")  # fmt: skip
    p.add_argument("--sim-to-robot-cells-seed", type=int, default=None,
                   help="sim_to_robot: the cells of an earlier call, to go on with (default: drawn now)")  # fmt: skip
    p.add_argument("--sim-to-robot-cells", default="",
                   help="sim_to_robot: the drawn cells' indices to run, e.g. 2,3 (default: all)")  # fmt: skip
    p.add_argument("--sim-to-robot-minutes", type=float, default=0.0,
                   help="sim_to_robot: begin no stage after this wall clock (0: no limit)")  # fmt: skip
    p.add_argument("--task", default="pick_cube", help="robot_loop: pick_cube | peg_insert (issue #29)")
    p.add_argument("--operator", default="person", help="robot_loop: person | oracle (the simulator's truth)")
    p.add_argument("--robots", default="sim", help="robot_loop: comma list of sim | ur5e (the UR driver's stand-in)")
    p.add_argument("--realtime", action="store_true", help="robot_loop, fleet_robots: sim robots in real time")
    p.add_argument("--out", type=Path, default=HERE / "results")
    p.add_argument("--tag", default="", help="the short tag of the run files' names (default: quick or full)")
    args = p.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    sys.path.insert(0, str(HERE))
    from common import provenance, run_name, write_run

    prov, run = provenance(), run_name(args.tag or ("quick" if args.quick else "full"))
    results: dict[str, list[dict]] = {}
    for area in args.only.split(","):
        if area not in AREAS:
            p.error(f"unknown area {area!r}; choose from {AREAS}")
        if area == "pixel_run" and args.pixel_minutes <= 0:
            continue
        mod = importlib.import_module(f"bench_{area}")
        kwargs = area_kwargs(area, args)
        started, t = time.time(), time.perf_counter()
        rows = results[area] = mod.main(**kwargs)
        duration = time.perf_counter() - t
        call = inspect.signature(mod.main).bind(**kwargs)
        call.apply_defaults()  # the area's own defaults (seeds, budgets, episodes) are parameters too
        params = {"argv": sys.argv[1:], "quick": args.quick, "call": dict(call.arguments)}
        path = write_run(args.out, area, run, params, rows, started, duration, prov)
        print(f"[{area}] {duration:.0f} s -> {path}", file=sys.stderr)
    table = to_markdown(results)
    print(table)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "latest.md").write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
