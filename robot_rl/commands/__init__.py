"""Every `robot-rl` command, one module each: its argument parsing and the call into the library, nothing else.

A module holds `main(argv) -> int` and, where it parses flags, `build_parser()` (docs/cli.md is generated from
those: `python -m robot_rl.commands.docs > docs/cli.md`). The library below this folder knows nothing of argparse;
`robot_rl/cli.py` picks the command and turns its errors into one line.
"""

# command -> its module, in the order `robot-rl --help` and docs/cli.md list them.
COMMANDS = {
    "train": "robot_rl.commands.train",
    "launch": "robot_rl.commands.launch",
    "learner": "robot_rl.commands.learner",
    "actor": "robot_rl.commands.actor",
    "eval": "robot_rl.commands.eval",
    "report": "robot_rl.commands.report",
    "collect": "robot_rl.commands.collect",
    "classifier": "robot_rl.commands.classifier",
    "dataset": "robot_rl.commands.dataset",
    "replay": "robot_rl.commands.replay",
    "plot": "robot_rl.commands.plot",
    "convert": "robot_rl.commands.convert",
    "deploy": "robot_rl.commands.deploy",
    "estop": "robot_rl.commands.estop",
    "gripper-bridge": "robot_rl.commands.gripper_bridge",
    "sim-robot": "robot_rl.commands.sim_robot",
    "vla-sft": "robot_rl.commands.vla_sft",
}
