"""`robot-rl <command> [hydra overrides]`: the one entry point for every job."""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import importlib
import json
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from hydra import compose, initialize_config_module
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

import robot_rl.configs
from robot_rl.config import TrainConfig, register_configs


class ConfigError(ValueError):
    pass


def _valid_keys(cls: type, prefix: str = "") -> list[str]:
    keys = []
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(f.default_factory if f.default_factory is not dataclasses.MISSING else None):
            keys += _valid_keys(f.default_factory, f"{prefix}{f.name}.")
        else:
            keys.append(prefix + f.name)
    return keys


def load_config(overrides: list[str]) -> TrainConfig:
    """Composes configs/ + overrides into a typed TrainConfig; a wrong key or group fails here, listing choices."""
    register_configs()
    if not any(o.startswith("profile=") for o in overrides):
        overrides = [*overrides, f"profile={'gpu' if torch.cuda.is_available() else 'cpu'}"]
    try:
        with initialize_config_module(config_module="robot_rl.configs", version_base="1.3"):
            cfg = compose(config_name="config", overrides=overrides)
        return OmegaConf.to_object(cfg)
    except (HydraException, OmegaConfBaseException) as e:
        valid, groups = _valid_keys(TrainConfig), _group_options()
        given = [o.split("=", 1)[0].lstrip("+~") for o in overrides if "=" in o]
        unknown = [k for k in given if k not in valid and k not in groups]
        msg = [f"bad configuration: {e}".rstrip()]
        for k in unknown:
            close = difflib.get_close_matches(k, valid, n=3, cutoff=0.5)
            if close:
                msg.append(f"'{k}': did you mean {', '.join(close)}?")
        msg.append("valid keys: " + ", ".join(valid))
        msg.append("config groups: " + ", ".join(f"{g}=<{'|'.join(o)}>" for g, o in groups.items()))
        raise ConfigError("\n".join(msg)) from None


def _group_options() -> dict[str, list[str]]:
    """The config groups `train` composes (the `defaults` of configs/config.yaml) and their options."""
    root = Path(robot_rl.configs.__file__).parent
    defaults = OmegaConf.load(root / "config.yaml").defaults
    groups = [next(iter(d)) for d in defaults if isinstance(d, DictConfig)]
    return {g: sorted(p.stem for p in (root / g).glob("*.yaml")) for g in groups}


def run_config(overrides: list[str]) -> TrainConfig:
    """The config of a new run, or with `resume=DIR` the run's saved one (only `loop.*` may be changed)."""
    cfg = load_config(overrides)
    if cfg.resume:
        saved = OmegaConf.load(Path(cfg.resume) / "config.yaml")
        merged = OmegaConf.merge(
            OmegaConf.structured(TrainConfig),
            saved,
            OmegaConf.from_dotlist([o for o in overrides if o.startswith("loop.")] + [f"resume={cfg.resume}"]),
        )
        cfg = OmegaConf.to_object(merged)
    return cfg


def cmd_train(overrides: list[str]) -> int:
    cfg = run_config(overrides)
    if cfg.algo == "bc":
        from robot_rl.loop.bc import train_bc as run
    else:
        from robot_rl.loop.trainer import train as run
    print(run(cfg))
    return 0


def cmd_learner(overrides: list[str]) -> int:
    from robot_rl.nodes.learner_node import run_learner

    print(run_learner(run_config(overrides)))
    return 0


def cmd_actor(args: list[str]) -> int:
    from robot_rl.nodes.actor_node import run_actor

    p = argparse.ArgumentParser(prog="robot-rl actor", description="an actor node; the rest are train overrides")
    p.add_argument("--index", type=int, default=0, help="actor number: sets its seed and name")
    p.add_argument("--episodes", type=int, default=0, help="stop after this many episodes (0: run until killed)")
    ns, overrides = p.parse_known_args(args)
    run_actor(load_config(overrides), ns.index, ns.episodes)
    return 0


def cmd_launch(overrides: list[str]) -> int:
    from robot_rl.nodes.launch import launch

    cfg = load_config(overrides)
    if not cfg.run_dir and not cfg.resume:
        from robot_rl.loop.trainer import default_run_dir

        overrides = [*overrides, f"run_dir={default_run_dir(cfg)}"]
        cfg = load_config(overrides)
    return launch(cfg, overrides)


def cmd_report(args: list[str]) -> int:
    from robot_rl.evaluation import aggregate_runs

    p = argparse.ArgumentParser(prog="robot-rl report", description="IQM + bootstrap CI over finished runs")
    p.add_argument("runs", nargs="+", type=Path)
    ns = p.parse_args(args)
    print(json.dumps(aggregate_runs(ns.runs), indent=1))
    return 0


def cmd_eval(args: list[str]) -> int:
    from robot_rl.evaluation import evaluate_checkpoint

    p = argparse.ArgumentParser(prog="robot-rl eval", description="run a checkpoint in sim: success, cycle time")
    p.add_argument("checkpoint", type=Path, help="a checkpoint folder, e.g. runs/<run>/checkpoints/final")
    p.add_argument("--episodes", type=int, default=20)
    p.add_argument("--video", type=Path, default=None, help="write one mp4 per episode and summary.json here")
    p.add_argument("--seed", type=int, default=2_000_000)
    ns = p.parse_args(args)
    summary = evaluate_checkpoint(ns.checkpoint, ns.episodes, ns.video, ns.seed)
    summary.pop("per_episode")
    print(json.dumps(summary, indent=1))
    return 0


# Subcommands that are their own module's argparse CLI, imported only when run.
TOOLS = {
    "collect": "robot_rl.demos.collect",
    "dataset": "robot_rl.demos.dataset",
    "replay": "robot_rl.demos.replay",
    "plot": "robot_rl.demos.report",
    "convert": "robot_rl.demos.interop.cli",
    "deploy": "robot_rl.real.deploy",
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


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print(
            "usage: robot-rl {" + "|".join(COMMANDS) + "} [args]\n"
            "  train [key=value ...]   HIL-SERL training run (hydra overrides, e.g. task=peg_insert obs=pixels)\n"
            "  launch [key=value ...]  the same run as 1 learner + distributed.n_actors actors over ROS 2 (DDS)\n"
            "  learner | actor --index i [key=value ...]   one node of a multi-machine run\n"
            "  eval CHECKPOINT [--episodes K] [--video DIR]   success and cycle time in sim, mp4 per episode\n"
            "  report RUN_DIR ...       IQM and bootstrap CI of final success over several runs\n"
            "  collect STORE -n N ...   record episodes with a teleop device (scripted|spacemouse|gamepad|keyboard)\n"
            "  dataset info|validate|merge|split|filter   episode store tools\n"
            "  replay STORE --episode i --out x.mp4 [--reexecute]\n"
            "  plot episode|training|report   PNG plots and the HTML dataset report\n"
            "  convert lerobot-export|lerobot-import|rosbag|legacy-zarr   dataset interop\n"
            "  deploy CHECKPOINT --robot sim|franka|ur5e [--episodes K] [--hz 10] [--record STORE]   run on a robot\n"
            "  sim-robot [--robot sim] [--latency S] [--noise M] [--friction LO HI] ...   MuJoCo arm on ROS 2 topics\n"
            "  vla-sft STORE OUT [--base tiny|full|DIR] [--finetune lora|full]   fine-tune pi0 on demos (vla extra)"
        )
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    try:
        return COMMANDS[argv[0]](argv[1:])
    except ConfigError as e:
        print(e, file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
