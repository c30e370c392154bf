"""`robot-rl launch [key=value ...]`: a train run as 1 learner + distributed.n_actors actors (ROS 2 or Zenoh)."""

from __future__ import annotations

from robot_rl.commands.train import node_config, run_config, train_help, wants_help


def main(overrides: list[str]) -> int:
    if wants_help(overrides):
        print(train_help("launch"))
        return 0
    from robot_rl.loop.checks import check_run_dir
    from robot_rl.loop.run import default_run_dir
    from robot_rl.nodes.launch import launch

    cfg = node_config(run_config(overrides))
    check_run_dir(cfg)
    if not cfg.run_dir and not cfg.resume:
        overrides = [*overrides, f"run_dir={default_run_dir(cfg)}"]
        cfg = node_config(run_config(overrides))
    return launch(cfg, overrides)
