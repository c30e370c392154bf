"""`robot-rl plot episode|training|dataset`: PNG plots and a static HTML dataset report."""

from __future__ import annotations

import argparse
from pathlib import Path

from robot_rl.commands.common import deprecation, note_deprecated
from robot_rl.errors import UserError

PROG = "robot-rl plot"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="PNG plots and a static HTML dataset report")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("episode", help="action and proprio traces of one episode")
    s.add_argument("store", type=Path, help="an episode store")
    s.add_argument("--episode", type=int, default=0, help="episode index")
    s.add_argument("--out", type=Path, required=True, help="PNG file")
    s = sub.add_parser("training", help="return / success / intervention rate over training")
    s.add_argument("run_dir", type=Path, help="a run dir, finished or still running")
    s.add_argument("--out", required=True, help="PNG file, or a folder (training.png inside it)")
    s = sub.add_parser("dataset", help="static HTML report of a dataset")
    s.add_argument("store", type=Path, help="an episode store")
    s.add_argument("--out", type=Path, required=True, help="folder for index.html, plots and videos")
    s.add_argument("--episodes", default="all", help="episodes to show: all, or a comma list such as 0,3,7")
    note_deprecated(PROG, "plot report", "plot dataset")
    return p


def main(argv: list[str]) -> int:
    from robot_rl.demos.report import html_report, plot_stored_episode, plot_training

    if argv[:1] == ["report"]:  # `robot-rl report` is the IQM over runs; this one is about a dataset
        deprecation(PROG, "plot report", "plot dataset")
        argv = ["dataset", *argv[1:]]
    ns = build_parser().parse_args(argv)
    if ns.cmd == "episode":
        path = plot_stored_episode(ns.store, ns.episode, ns.out)
    elif ns.cmd == "training":
        path = plot_training(ns.run_dir, ns.out)
    else:
        try:
            chosen = None if ns.episodes == "all" else [int(i) for i in ns.episodes.split(",")]
        except ValueError:
            raise UserError(f"--episodes {ns.episodes}: expected all or a comma list of episode numbers") from None
        path = html_report(ns.store, ns.out, chosen)
    print(path)
    return 0
