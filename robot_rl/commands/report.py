"""`robot-rl report RUN_DIR ...`: IQM and bootstrap CI of final success over finished runs."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="robot-rl report", description="IQM + bootstrap CI over finished runs")
    p.add_argument("runs", nargs="+", type=Path, help="run dirs (e.g. runs/*); unfinished ones are skipped with a note")
    return p


def main(args: list[str]) -> int:
    ns = build_parser().parse_args(args)
    from robot_rl.evaluation import aggregate_runs, finished_runs

    print(json.dumps(aggregate_runs(finished_runs(ns.runs)), indent=1))
    return 0
