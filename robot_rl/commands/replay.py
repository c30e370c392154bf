"""`robot-rl replay STORE --episode i --out x.mp4 [--reexecute]`: render or re-execute a stored episode."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="robot-rl replay", description="render or re-execute a stored episode")
    p.add_argument("store", type=Path, help="an episode store")
    p.add_argument("--episode", type=int, default=0, help="episode index")
    p.add_argument("--out", type=Path, help="video file (.mp4, .webm, .avi)")
    p.add_argument("--fps", type=float, default=10.0, help="video frame rate")
    p.add_argument("--reexecute", action="store_true", help="re-run the actions in sim and report divergence")
    p.add_argument("--tol", type=float, default=1e-4, help="state error above which a step counts as divergent")
    return p


def main(argv: list[str]) -> int:
    from robot_rl.demos.replay import reexecute, render_episode

    p = build_parser()
    ns = p.parse_args(argv)
    if ns.out is None and not ns.reexecute:
        p.error("give --out and/or --reexecute")
    result: dict[str, Any] = {}
    if ns.out is not None:
        result["video"] = render_episode(ns.store, ns.episode, ns.out, ns.fps)
    if ns.reexecute:
        result["reexecute"] = reexecute(ns.store, ns.episode, ns.tol)
    print(json.dumps(result, indent=1))
    if result.get("reexecute", {}).get("label_differs"):
        print("note: the replay matches, but the operator labelled the episode differently from the env's success "
              "check", file=sys.stderr)  # fmt: skip
    return 1 if result.get("reexecute", {}).get("diverged") else 0
