"""`robot-rl train [group=option ...] [key=value ...]`: one HIL-SERL training run in this process.

The overrides are hydra's (`train --help` lists the groups and the common keys). The config a command line means
lives here too: `run_config` (a new run, or a resumed one) and `node_config` (the same for the ROS 2 nodes)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from robot_rl.errors import ConfigError, UserError

if TYPE_CHECKING:  # torch and hydra load in seconds: `robot-rl --help` imports them only when used
    from robot_rl.config import TrainConfig


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
    return start_from_checkpoint(cfg, overrides)


def start_from_checkpoint(cfg: TrainConfig, overrides: list[str]) -> TrainConfig:
    """A new run started from a checkpoint (`init_from`) takes the checkpoint's input pipeline
    (`config.INPUT_PIPELINE`: frame standardisation, ...) and says so on one line: a sim camera policy trained with
    standardised frames would read a robot run's raw ones without a word. A value the command line sets otherwise is
    refused. The fine-tuning defaults (`config.FINETUNE_DEFAULTS`) fill what the command line leaves unset. The run
    keeps the checkpoint folder this resolved to (a run dir names its final or latest one), so it starts from exactly
    the weights whose pipeline was read here, and its config says which."""
    if not cfg.init_from or cfg.resume:
        return cfg
    from omegaconf import OmegaConf

    from robot_rl.checkpoint import Checkpoint, pipeline_differences
    from robot_rl.config import FINETUNE_DEFAULTS, input_pipeline

    ckpt = Checkpoint(cfg.init_from)
    theirs, mine = ckpt.pipeline, input_pipeline(cfg)
    named = {o.split("=", 1)[0].lstrip("+") for o in overrides}
    if clash := pipeline_differences({k: v for k, v in theirs.items() if k in named}, mine):
        raise UserError(f"init_from={cfg.init_from}: its policy was trained with {clash}: drop that override")
    if diff := pipeline_differences(theirs, mine):
        print(f"note: init_from={cfg.init_from}: taking its input pipeline, {diff}", file=sys.stderr)
    defaults = {k: v for k, v in FINETUNE_DEFAULTS.items() if k not in named}
    if defaults:
        said = ", ".join(f"{k}={v}" for k, v in defaults.items())
        print(f"note: init_from={cfg.init_from}: fine-tuning defaults {said} (set them to change)", file=sys.stderr)
    node = OmegaConf.structured(cfg)
    for key, value in {**theirs, **defaults, "init_from": str(ckpt.path)}.items():
        OmegaConf.update(node, key, value)
    return OmegaConf.to_object(node)


# Keys a person sets most, with what they mean; `train --help` prints them with their defaults.
COMMON_KEYS = {
    "seed": "random seed of the run (envs, demos, networks)",
    "run_dir": "where the run writes (empty: runs/<task>-<obs>-s<seed>-<time>); never overwritten",
    "resume": "a run dir to continue from its latest checkpoint (only loop.* may change)",
    "init_from": "a sim run or checkpoint to start from: actor, critic, camera trunks, normaliser (same layout)",
    "record": "a robot run records the arm's topics and its commands to this FILE.mcap (ros2 bag, Foxglove)",
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


def wants_help(args: list[str]) -> bool:
    return any(a in ("-h", "--help") for a in args)


def node_config(cfg: TrainConfig) -> TrainConfig:
    """`cfg` for the ROS 2 nodes, whose actors step one env each (`distributed.n_actors` of them)."""
    if cfg.loop.num_envs > 1:
        raise ConfigError(f"bad configuration: loop.num_envs={cfg.loop.num_envs} batches envs in `robot-rl train`; "
                          "actor nodes step one env each: set distributed.n_actors instead")  # fmt: skip
    dist = cfg.distributed
    if dist.learners < 1 or (dist.learners > 1 and dist.plane != "zenoh"):
        raise ConfigError(f"bad configuration: distributed.learners={dist.learners}: 1, or more on "
                          "distributed.plane=zenoh (its keys carry each rank's shard)")  # fmt: skip
    if cfg.reward.refit_every and dist.plane != "zenoh":  # verdicts ride with the episode summaries on Zenoh
        raise ConfigError("bad configuration: reward.refit_every: the actors' verdicts reach the learner on "
                          "distributed.plane=zenoh only (ros2 is the old plane, kept for one release)")  # fmt: skip
    return cfg


def main(overrides: list[str]) -> int:
    if wants_help(overrides):
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
