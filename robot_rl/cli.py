"""`robot-rl <command> [hydra overrides]`: the one entry point for every job."""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import signal
import sys
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from robot_rl.errors import ConfigError, UserError

if TYPE_CHECKING:  # torch and hydra load in seconds: `robot-rl --help` and the tools import them only when used
    from robot_rl.config import TrainConfig

__all__ = ["ConfigError", "run_config", "main"]


def run_config(overrides: list[str]) -> TrainConfig:
    """The config of a new run, or with `resume=DIR` the run's saved one (only `loop.*` may be changed)."""
    from omegaconf import OmegaConf

    from robot_rl.checkpoint import latest_checkpoint
    from robot_rl.config import TrainConfig, check_config, load_config

    cfg = load_config(overrides)
    if cfg.resume:
        if not (Path(cfg.resume) / "config.yaml").is_file():
            raise UserError(f"resume={cfg.resume}: no run there (no {Path(cfg.resume) / 'config.yaml'})")
        if latest_checkpoint(Path(cfg.resume) / "checkpoints") is None:
            print(f"note: {cfg.resume} has no checkpoint yet: it starts again from step 0", file=sys.stderr)
        saved = OmegaConf.load(Path(cfg.resume) / "config.yaml")
        merged = OmegaConf.merge(
            OmegaConf.structured(TrainConfig),
            saved,
            OmegaConf.from_dotlist([o for o in overrides if o.startswith("loop.")] + [f"resume={cfg.resume}"]),
        )
        cfg = OmegaConf.to_object(merged)
        check_config(cfg)
    return cfg


# Keys a person sets most, with what they mean; `train --help` prints them with their defaults.
COMMON_KEYS = {
    "seed": "random seed of the run (envs, demos, networks)",
    "run_dir": "where the run writes (empty: runs/<task>-<obs>-s<seed>-<time>); never overwritten",
    "resume": "a run dir to continue from its latest checkpoint (only loop.* may change)",
    "init_from": "a sim run or checkpoint to start from: actor, critic, camera trunks, normaliser (same layout)",
    "device": "auto | cpu | cuda[:N]",
    "loop.env_steps": "online env-step budget",
    "loop.eval_every": "env steps between evaluations",
    "loop.checkpoint_every": "env steps between checkpoints (0: only at the end; Ctrl-C also saves)",
    "loop.max_minutes": "wall-clock budget, start-up and resumes included (0: none)",
    "loop.stop_at_success": "stop once an evaluation reaches this success rate (>1: never)",
    "loop.eval_robot_minutes": "a robot run's arm time per evaluation (the final one: loop.final_eval_robot_minutes)",
    "demos.n_episodes": "scripted demos collected into the run before training",
    "demos.path": "train from this demo store instead (e.g. `robot-rl collect` teleop demos)",
    "intervention.enabled": "a simulated human takes over when the policy stalls (HIL-SERL)",
    "intervention.device": "a teleop device takes over instead (spacemouse|gamepad|keyboard|simulated; robot runs)",
    "reward.source": "env | classifier (a learned success detector, as on a robot)",
    "reward.classifier_path": "a robot run's classifier (`robot-rl classifier train` on labelled frames)",
    "env.for_robot": "train for this arm: its limits, and with obs=pixels its observations (franka | a robot yaml)",
    "sac.utd": "critic updates per env step",
    "loop.num_envs": "envs one batched actor steps (sim=maniskill; PhysX GPU with CUDA)",
    "loop.overlap": "learner updates in a thread while the actor steps (profile=gpu; not bit-reproducible)",
}

TRAIN_EXAMPLES = """examples:
  robot-rl train                                   PickCube from state, 8000 env steps
  robot-rl train task=peg_insert obs=pixels seed=3
  robot-rl train demos.path=data/kb.zarr loop.env_steps=20000
  robot-rl train resume=runs/<run>                 continue after a crash or Ctrl-C
  robot-rl train robot=sim robot.lockstep=true intervention.enabled=false   (the arm of `sim-robot --lockstep`)
  robot-rl train robot=sim robot.lockstep=true reward.source=classifier reward.classifier_path=c.safetensors
    intervention.device=simulated        (reward from labelled frames; the simulated operator in the loop)
  robot-rl train algo=bc_diffusion demos.path=data/demos.zarr"""


def train_help(command: str) -> str:
    """`robot-rl train --help`: the groups to pick from, the keys people set, their defaults, and examples."""
    from omegaconf import OmegaConf

    from robot_rl.config import TrainConfig, config_keys, group_defaults, group_options

    cfg = OmegaConf.structured(TrainConfig)
    defaults = group_defaults()
    lines = [
        f"usage: robot-rl {command} [group=option ...] [key=value ...]",
        "",
        "config groups (default marked *):",
        *(
            f"  {g:<14} " + " | ".join(o + ("*" if o == defaults.get(g) else "") for o in options)
            for g, options in group_options().items()
        ),
        "",
        "common keys (default: meaning):",
        *(f"  {k:<24} {OmegaConf.select(cfg, k)!s:<8} {meaning}" for k, meaning in COMMON_KEYS.items()),
        "",
        f"all {len(config_keys(TrainConfig))} keys and their defaults live in robot_rl/config.py; a wrong key says "
        "which keys are close.",
        "",
        TRAIN_EXAMPLES,
    ]
    return "\n".join(lines)


def _wants_help(args: list[str]) -> bool:
    return any(a in ("-h", "--help") for a in args)


def cmd_train(overrides: list[str]) -> int:
    if _wants_help(overrides):
        print(train_help("train"))
        return 0
    from robot_rl.algos.registry import algorithm

    cfg = run_config(overrides)
    if algorithm(cfg.algo).offline:  # from the demo store alone
        from robot_rl.loop.bc import train_bc as run
    else:
        from robot_rl.loop.trainer import train as run
    summary = run(cfg)
    print(summary)
    return 130 if json.loads(summary.read_text()).get("status") == "interrupted" else 0


def node_config(cfg: TrainConfig) -> TrainConfig:
    """`cfg` for the ROS 2 nodes, whose actors step one env each (`distributed.n_actors` of them) and refit no
    classifier."""
    if cfg.loop.num_envs > 1:
        raise ConfigError(f"bad configuration: loop.num_envs={cfg.loop.num_envs} batches envs in `robot-rl train`; "
                          "actor nodes step one env each: set distributed.n_actors instead")  # fmt: skip
    if cfg.reward.refit_every:  # a person's verdicts stay in the actor's process, the classifier to refit too
        raise ConfigError("bad configuration: reward.refit_every refits the classifier in one process (`robot-rl "
                          "train`); the actor and learner nodes do not pass verdicts or classifiers yet: set "
                          "reward.refit_every=0")  # fmt: skip
    return cfg


def cmd_learner(overrides: list[str]) -> int:
    if _wants_help(overrides):
        print(train_help("learner"))
        return 0
    from robot_rl.nodes.learner_node import run_learner

    print(run_learner(node_config(run_config(overrides))))
    return 0


def cmd_actor(args: list[str]) -> int:
    p = argparse.ArgumentParser(prog="robot-rl actor", description="an actor node; the rest are train overrides")
    p.add_argument("--index", type=int, default=0, help="actor number: sets its seed and name")
    p.add_argument("--episodes", type=int, default=0, help="stop after this many episodes (0: run until killed)")
    ns, overrides = p.parse_known_args(args)
    from robot_rl.config import load_config
    from robot_rl.nodes.actor_node import run_actor

    run_actor(node_config(load_config(overrides)), ns.index, ns.episodes)
    return 0


def cmd_launch(overrides: list[str]) -> int:
    if _wants_help(overrides):
        print(train_help("launch"))
        return 0
    from robot_rl.config import load_config
    from robot_rl.loop.checks import check_run_dir
    from robot_rl.loop.run import default_run_dir
    from robot_rl.nodes.launch import launch

    cfg = node_config(run_config(overrides))
    check_run_dir(cfg)
    if not cfg.run_dir and not cfg.resume:
        overrides = [*overrides, f"run_dir={default_run_dir(cfg)}"]
        cfg = load_config(overrides)
    return launch(cfg, overrides)


def cmd_report(args: list[str]) -> int:
    p = argparse.ArgumentParser(prog="robot-rl report", description="IQM + bootstrap CI over finished runs")
    p.add_argument("runs", nargs="+", type=Path, help="run dirs (e.g. runs/*); unfinished ones are skipped with a note")
    ns = p.parse_args(args)
    from robot_rl.evaluation import aggregate_runs, finished_runs

    print(json.dumps(aggregate_runs(finished_runs(ns.runs)), indent=1))
    return 0


def cmd_eval(args: list[str]) -> int:
    p = argparse.ArgumentParser(prog="robot-rl eval", description="run a checkpoint in sim: success, cycle time")
    p.add_argument("checkpoint", type=Path, help="a run dir (its final or latest checkpoint) or a checkpoint folder")
    p.add_argument("--episodes", type=int, default=20, help="evaluation episodes")
    p.add_argument("--video", type=Path, default=None, help="write one mp4 per episode and summary.json here")
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
    ns = p.parse_args(args)
    if ns.episodes < 1:
        raise UserError(f"--episodes {ns.episodes}: must be >= 1")
    from robot_rl.evaluation import camera_reliance, evaluate_checkpoint

    if ns.per_camera:
        rows = camera_reliance(ns.checkpoint, ns.episodes, ns.seed, ns.nominal)
        for r in rows:
            print(f"blanked {r['blanked']:>8}: success {r['success_rate']:.2f}  kept {r['kept']:.2f}", file=sys.stderr)
        print(json.dumps(rows, indent=1))
        return 0
    summary = evaluate_checkpoint(ns.checkpoint, ns.episodes, ns.video, ns.seed, ns.nominal, ns.blank)
    summary.pop("per_episode")
    print(json.dumps(summary, indent=1))
    return 0


# Subcommands that are their own module's argparse CLI, imported only when run.
TOOLS = {
    "collect": "robot_rl.demos.collect",
    "classifier": "robot_rl.loop.classifier",
    "dataset": "robot_rl.demos.dataset",
    "replay": "robot_rl.demos.replay",
    "plot": "robot_rl.demos.report",
    "convert": "robot_rl.demos.interop.cli",
    "deploy": "robot_rl.real.deploy",
    "estop": "robot_rl.real.estop",
    "gripper-bridge": "robot_rl.real.gripper_bridge",
    "sim-robot": "robot_rl.real.sim_robot",
    "vla-sft": "robot_rl.policies.vla.sft",
}


def _tool(module: str) -> Callable[[list[str]], int]:
    return lambda args: importlib.import_module(module).main(args)


COMMANDS = {
    "train": cmd_train,
    "launch": cmd_launch,
    "learner": cmd_learner,
    "actor": cmd_actor,
    "eval": cmd_eval,
    "report": cmd_report,
    **{name: _tool(module) for name, module in TOOLS.items()},
}


USAGE = (
    "usage: robot-rl [--debug] {" + "|".join(COMMANDS) + "} [args]   (`robot-rl <command> --help` for each)\n"
    "  train [key=value ...]   HIL-SERL training run (hydra overrides, e.g. task=peg_insert obs=pixels)\n"
    "  launch [key=value ...]  the same run as 1 learner + distributed.n_actors actors over ROS 2 (DDS)\n"
    "  learner | actor --index i [key=value ...]   one node of a multi-machine run\n"
    "  eval RUN_DIR|CHECKPOINT [--episodes K] [--video DIR] [--nominal]   success, cycle time in sim; mp4s\n"
    "  report RUN_DIR ...       IQM and bootstrap CI of final success over several runs\n"
    "  collect STORE -n N ...   record episodes with a teleop device (scripted|spacemouse|gamepad|keyboard)\n"
    "  classifier train STORE OUT | eval CLF STORE   success classifier from frames a person labelled\n"
    "  dataset info|validate|merge|split|filter   episode store tools\n"
    "  replay STORE --episode i --out x.mp4 [--reexecute]\n"
    "  plot episode|training|report   PNG plots and the HTML dataset report\n"
    "  convert lerobot-export|lerobot-import|rosbag|legacy-zarr   dataset interop\n"
    "  deploy RUN_DIR|CHECKPOINT --robot sim|franka|ur5e [--episodes K] [--hz 10] [--record STORE]   run on a robot\n"
    "  estop press|release [--robot sim]   latch or clear a robot's e-stop from a shell\n"
    "  gripper-bridge --robot franka|ur5e   the gripper opening topic -> the driver's gripper action (robot PC)\n"
    "  sim-robot [--task pick_cube|peg_insert] [--latency S] [--friction LO HI] ...   MuJoCo arm on ROS 2 topics\n"
    "  vla-sft STORE OUT [--base tiny|full|DIR] [--finetune lora|full]   fine-tune pi0 on demos (vla extra)\n"
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
