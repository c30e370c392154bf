"""`robot-rl learner [key=value ...]`: the learner node of a multi-machine run (the train overrides)."""

from __future__ import annotations

from robot_rl.commands.train import node_config, run_config, train_help, wants_help


def main(overrides: list[str]) -> int:
    if wants_help(overrides):
        print(train_help("learner"))
        return 0
    from robot_rl.nodes.learner_node import run_learner

    print(run_learner(node_config(run_config(overrides)), overrides))
    return 0
