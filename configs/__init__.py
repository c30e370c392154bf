"""Hydra config groups (YAML). `task_names` maps each `task=` option onto the env task it runs, so every command
(train, collect, sim-robot, ...) takes the same task names; nothing here imports a simulator."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from robot_rl.errors import UserError


def task_names() -> dict[str, str]:
    """`task=` option (pick_cube, PickCube-v1, ...) -> the env's task id (PickCube, PickCube-v1, ...)."""
    from omegaconf import OmegaConf

    return {p.stem: OmegaConf.load(p).env.task for p in sorted((Path(__file__).parent / "task").glob("*.yaml"))}


def task_option(name: str, among: Collection[str] | None = None, arg: str = "--task") -> str:
    """The `task=` option `name` stands for: itself, or the option whose env task id it is (PickCube: what
    sim-robot took before, kept for old scripts). `among`: only options whose env task is one of these (a command
    that runs some tasks only). Anything else is a UserError that lists the valid names."""
    every = task_names()
    names = {k: v for k, v in every.items() if among is None or v in among}
    by_id = {v: k for k, v in names.items()}
    if name in names or name in by_id:
        return by_id.get(name, name)
    why = "not a task this command runs" if name in every or name in every.values() else "unknown task"
    raise UserError(f"{arg} {name}: {why}; expected one of {', '.join(names)} (the names of `train task=`)")


def env_task(name: str) -> str:
    """The env task id a task name means where any task may appear (episode stores hold foreign tasks too): a
    `task=` option becomes its env task id (peg_insert -> PegInsert), every other name stays as it is."""
    return task_names().get(name, name)
