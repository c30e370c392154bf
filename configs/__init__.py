"""Hydra config groups (YAML). `task_names` maps each `task=` option onto the env task it runs, so every command
(train, collect, ...) takes the same task names."""

from __future__ import annotations

from pathlib import Path


def task_names() -> dict[str, str]:
    """`task=` option (pick_cube, PickCube-v1, ...) -> the env's task id (PickCube, PickCube-v1, ...)."""
    from omegaconf import OmegaConf

    return {p.stem: OmegaConf.load(p).env.task for p in sorted((Path(__file__).parent / "task").glob("*.yaml"))}
