"""`robot-rl eval RUN_DIR|CHECKPOINT`: run a checkpoint in sim: success, cycle time, videos."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from robot_rl.commands.common import renamed_flag
from robot_rl.errors import UserError


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="robot-rl eval", description="run a checkpoint in sim: success, cycle time")
    p.add_argument("checkpoint", type=Path, help="a run dir (its final or latest checkpoint) or a checkpoint folder")
    p.add_argument("--episodes", type=int, default=20, help="evaluation episodes")
    p.add_argument("--out", type=Path, default=None, help="write one mp4 per episode and summary.json in this folder")
    p.add_argument("--seed", type=int, default=2_000_000, help="seed of the first episode (then +1 per episode)")
    p.add_argument(
        "--nominal",
        action="store_true",
        help="without the run's domain randomisation (what the policy observes stays as trained)",
    )
    p.add_argument("--blank", action="append", default=[], metavar="CAMERA",
                   help="this camera's frames come black (repeatable): how the policy does without it")  # fmt: skip
    p.add_argument("--per-camera", action="store_true",
                   help="success with all cameras, then with each blanked in turn: what each one carries")  # fmt: skip
    renamed_flag(p, "--video", "--out", type=Path)
    return p


def main(args: list[str]) -> int:
    ns = build_parser().parse_args(args)
    if ns.episodes < 1:
        raise UserError(f"--episodes {ns.episodes}: must be >= 1")
    from robot_rl.checkpoint import Checkpoint
    from robot_rl.evaluation import camera_reliance, evaluate_checkpoint

    ckpt = Checkpoint(ns.checkpoint)
    if ns.per_camera:
        rows = camera_reliance(ckpt, ns.episodes, ns.seed, ns.nominal)
        for r in rows:
            print(f"blanked {r['blanked']:>8}: success {r['success_rate']:.2f}  kept {r['kept']:.2f}", file=sys.stderr)
        print(json.dumps(rows, indent=1))
        return 0
    summary = evaluate_checkpoint(ckpt, ns.episodes, ns.out, ns.seed, ns.nominal, ns.blank)
    summary.pop("per_episode")
    print(json.dumps(summary, indent=1))
    return 0
