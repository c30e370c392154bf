"""`robot-rl dataset info|validate|merge|split|filter`: episode store tools."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def build_parser() -> argparse.ArgumentParser:
    from robot_rl.configs import env_task
    from robot_rl.demos.store import SOURCES

    p = argparse.ArgumentParser(prog="robot-rl dataset", description="episode store tools")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("info", help="shapes, counts, lengths, success rate, disk size; exit 1 if damaged")
    s.add_argument("store", type=Path, help="an episode store")
    s = sub.add_parser("validate", help="check every invariant; exit 1 on problems")
    s.add_argument("store", type=Path, help="an episode store")
    s.add_argument(
        "--repair",
        action="store_true",
        help="rebuild from the readable episodes only (the report names each dropped one); original kept as .bak",
    )
    s = sub.add_parser("merge", help="concatenate stores (all checked first; no output on failure)")
    s.add_argument("inputs", type=Path, nargs="+", help="stores with the same keys, dtypes and shapes")
    s.add_argument("--out", type=Path, required=True, help="the new store (must not exist)")
    s = sub.add_parser("split", help="train/val split by episode")
    s.add_argument("store", type=Path, help="an episode store")
    s.add_argument("--out", type=Path, required=True, help="new folder for the train/ and val/ stores")
    s.add_argument("--val", type=float, default=0.1, help="fraction of episodes for validation")
    s.add_argument("--seed", type=int, default=0, help="seed of the random split")
    s = sub.add_parser("filter", help="copy matching episodes")
    s.add_argument("store", type=Path, help="an episode store")
    s.add_argument("--out", type=Path, required=True, help="the new store (must not exist)")
    s.add_argument("--success", choices=("true", "false"), help="keep only successful / failed episodes")
    s.add_argument("--source", choices=sorted(SOURCES), help="keep only episodes of this source")
    s.add_argument("--task", type=env_task, help="keep only episodes of this task (a `train task=` name, e.g. "
                   "peg_insert, or the task an episode records)")  # fmt: skip
    s.add_argument("--min-length", type=int, default=0, help="keep episodes at least this many steps long")
    s.add_argument("--max-length", type=int, help="keep episodes at most this many steps long")
    return p


def main(argv: list[str]) -> int:
    from robot_rl.demos.dataset import filter_store, info, merge, split, validate

    ns = build_parser().parse_args(argv)
    commands: dict[str, Callable[[], int]] = {
        "info": lambda: _report_info(info(ns.store)),
        "validate": lambda: _report_validation(validate(ns.store, repair=ns.repair)),
        "merge": lambda: _print({"episodes": merge(ns.inputs, ns.out)}),
        "split": lambda: _print(split(ns.store, ns.out, ns.val, ns.seed)),
        "filter": lambda: _print(
            {
                "episodes": filter_store(
                    ns.store,
                    ns.out,
                    success=None if ns.success is None else ns.success == "true",
                    source=ns.source,
                    task=ns.task,
                    min_length=ns.min_length,
                    max_length=ns.max_length,
                )
            }
        ),
    }
    return commands[ns.cmd]()


def _print(obj: Any) -> int:
    print(json.dumps(obj, indent=1, default=str))
    return 0


def _report_info(report: dict[str, Any]) -> int:
    _print(report)
    if not report["ok"]:
        print(f"DAMAGED: {report['problems'][0]} (`robot-rl dataset validate {report['path']} --repair`)",
              file=sys.stderr)  # fmt: skip
    return 0 if report["ok"] else 1


def _report_validation(report: dict[str, Any]) -> int:
    _print(report)
    if not report["ok"]:
        print(f"INVALID: {len(report['problems'])} problem(s)", file=sys.stderr)
    return 0 if report["ok"] else 1
