"""`robot-rl actor --index i [key=value ...]`: one actor node of a multi-machine run (the rest are train overrides)."""

from __future__ import annotations

import argparse

from robot_rl.commands.train import node_config, start_from_checkpoint


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="robot-rl actor", description="an actor node; the rest are train overrides")
    p.add_argument("--index", type=int, default=0, help="actor number: sets its seed and name")
    p.add_argument("--episodes", type=int, default=0, help="stop after this many episodes (0: run until killed)")
    return p


def main(args: list[str]) -> int:
    ns, overrides = build_parser().parse_known_args(args)
    from robot_rl.config import load_config
    from robot_rl.nodes.actor_node import run_actor

    run_actor(node_config(start_from_checkpoint(load_config(overrides), overrides)), ns.index, ns.episodes)
    return 0
