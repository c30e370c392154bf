"""`robot-rl <command> [args]`: the one entry point for every job. Each command is a module of robot_rl/commands/
(its argument parsing and the call into the library); this file only picks one and turns errors into one line."""

from __future__ import annotations

import argparse
import importlib
import logging
import signal
import sys
import threading
import warnings
from collections.abc import Callable

from robot_rl.commands import COMMANDS as MODULES
from robot_rl.errors import UserError

__all__ = ["COMMANDS", "main"]


def _command(module: str) -> Callable[[list[str]], int]:
    """A command's `main`, its module imported only when it runs (`robot-rl --help` stays fast)."""
    return lambda args: importlib.import_module(module).main(args)


COMMANDS: dict[str, Callable[[list[str]], int]] = {name: _command(module) for name, module in MODULES.items()}


USAGE = (
    "usage: robot-rl [--debug] {" + "|".join(COMMANDS) + "} [args]   (`robot-rl <command> --help` for each)\n"
    "  train [key=value ...]   HIL-SERL training run (hydra overrides, e.g. task=peg_insert obs=pixels)\n"
    "  launch [key=value ...]  the same run as 1 learner + distributed.n_actors actors over ROS 2 (DDS)\n"
    "  learner | actor --index i [key=value ...]   one node of a multi-machine run\n"
    "  eval RUN_DIR|CHECKPOINT [--episodes K] [--out DIR] [--nominal]   success, cycle time in sim; mp4s\n"
    "  report RUN_DIR ...       IQM and bootstrap CI of final success over several runs\n"
    "  collect STORE -n N [--teleop scripted|spacemouse|gamepad|keyboard] [--robot NAME] ...   record episodes\n"
    "  classifier train STORE --out CLF | eval CLF STORE   success classifier from frames a person labelled\n"
    "  dataset info|validate|merge|split|filter   episode store tools\n"
    "  replay STORE --episode i --out x.mp4 [--reexecute]\n"
    "  plot episode|training|dataset   PNG plots and the HTML dataset report\n"
    "  convert lerobot-export|lerobot-import|rosbag|session|legacy-zarr   dataset interop\n"
    "  deploy RUN_DIR|CHECKPOINT --robot sim|franka|ur5e [--episodes K] [--control-hz 10] [--record STORE|FILE.mcap]\n"
    "  estop press|release [--robot sim]   latch or clear a robot's e-stop from a shell\n"
    "  gripper-bridge --robot franka|ur5e   the gripper opening topic -> the driver's gripper action (robot PC)\n"
    "  sim-robot [--task pick_cube|peg_insert] [--latency S] [--friction LO HI] ...   MuJoCo arm on ROS 2 topics\n"
    "  vla-sft STORE --out DIR [--base tiny|full|DIR] [--finetune lora|full]   fine-tune pi0 on demos (vla extra)\n"
    "  (docs/cli.md: every command and its flags)\n"
    "  --debug: show the Python traceback of an error instead of its one-line message"
)


def _one_line_error(parser: argparse.ArgumentParser, message: str) -> None:
    raise UserError(f"{message} (see {parser.prog} --help)")


def _caused_by_ctrl_c(e: BaseException) -> bool:
    """Whether `e` stands for a Ctrl-C: a C extension whose import is interrupted (pybind11's, e.g. mujoco) raises
    `ImportError: initialization failed` from the KeyboardInterrupt."""
    while e is not None:
        if isinstance(e, KeyboardInterrupt):
            return True
        e = e.__cause__
    return False


def catch_sigint() -> None:
    """Makes SIGINT raise KeyboardInterrupt even where it was inherited ignored: a shell starts a script's
    background jobs (`robot-rl train ... &`, `./dev test &`) with SIGINT ignored, and Python then leaves it so,
    which silently dropped Ctrl-C / `kill -INT` and the run went on training. Every command here stops on it (a
    training run saves first)."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)


def main(argv: list[str] | None = None) -> int:
    """Runs one command. A `UserError` becomes one line on stderr and exit code 2 (a traceback with --debug);
    Ctrl-C that a command does not handle itself ends with exit code 130, also without a traceback."""
    catch_sigint()
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv[:1]
    argv = argv[1:] if debug else argv
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print(USAGE, file=sys.stdout if argv and argv[0] in ("-h", "--help") else sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    # Every tool's argparse mistakes become one line too (some parsers live in modules this file does not own).
    argparse_error, argparse.ArgumentParser.error = argparse.ArgumentParser.error, _one_line_error
    try:
        return COMMANDS[argv[0]](argv[1:])
    except UserError as e:
        if debug:
            raise
        print(f"robot-rl {argv[0]}: error: {e.one_line()}", file=sys.stderr)
        return 2
    except BaseException as e:  # Ctrl-C, as itself or as what a library turned it into
        if debug or not _caused_by_ctrl_c(e):
            raise
        # Store writes cut short are abandoned (the store keeps only whole episodes); zarr's event loop would report
        # each of its pending tasks at exit, with a traceback, after this line; a write coroutine created but never
        # started is reported by Python itself.
        logging.getLogger("asyncio").setLevel(logging.CRITICAL + 1)
        warnings.filterwarnings("ignore", message="coroutine .* was never awaited", category=RuntimeWarning)
        print(f"robot-rl {argv[0]}: interrupted", file=sys.stderr)
        return 130
    finally:
        argparse.ArgumentParser.error = argparse_error


if __name__ == "__main__":
    sys.exit(main())
