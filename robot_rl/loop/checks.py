"""Start-up checks that need more than the config (which `robot_rl.config.check_config` checks at load): the run
dir and the demo store, each failing in one line before any work."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from robot_rl.algos.registry import algorithm
from robot_rl.config import TrainConfig
from robot_rl.configs import task_names
from robot_rl.demos.store import EpisodeStore
from robot_rl.errors import UserError
from robot_rl.types import ObsLayout, Transition


def holds_run(run_dir: Path) -> list[str]:
    """What in `run_dir` a new run would overwrite: its summary, evaluations or checkpoints."""
    return [n for n in ("summary.json", "evals.jsonl", "checkpoints") if (run_dir / n).exists()]


def check_run_dir(cfg: TrainConfig) -> None:
    """A new run never writes over an earlier one (a failed start, with only config.yaml, may be reused)."""
    if cfg.run_dir and not cfg.resume and (found := holds_run(Path(cfg.run_dir))):
        raise UserError(
            f"run_dir={cfg.run_dir} already holds a run ({', '.join(found)}): continue it with "
            f"resume={cfg.run_dir}, or pick another run_dir"
        )


def env_layout(cfg: TrainConfig) -> ObsLayout:
    """What the run's env observes (a robot's without connecting to it): what demos must store."""
    from robot_rl.envs import make_env, robot_layout

    if cfg.robot is not None:
        return robot_layout(cfg.env, cfg.robot)
    env = make_env(cfg.env)
    try:
        return ObsLayout.of_env(env, cfg.env.max_step, cfg.env.control_hz)
    finally:
        env.close()


def state_fields(stored: dict, wanted: dict[str, tuple[int, int]], where: str) -> np.ndarray | None:
    """Indices into a stored `state` that give the run's layout, picked by field name (a robot store records joints
    and the tracker's object pose; a robot run reads only the proprio fields); None when the layouts agree."""
    stored = {k: list(v) for k, v in (stored or {}).items()}
    wanted = {k: list(v) for k, v in wanted.items()}
    if not stored or not wanted or stored == wanted:
        return None
    bad = [k for k, (a, b) in wanted.items() if k not in stored or stored[k][1] - stored[k][0] != b - a]
    if bad:
        raise UserError(f"{where} records state fields {list(stored)} without {bad}, which this run observes "
                        f"({list(wanted)}): record demos that measure them (`collect --robot NAME`)")  # fmt: skip
    return np.concatenate([np.arange(*stored[k]) for k in wanted])


def pick_state(t: Transition, idx: np.ndarray) -> Transition:
    return dataclasses.replace(t, obs={**t.obs, "state": t.obs["state"][idx]},
                               next_obs={**t.next_obs, "state": t.next_obs["state"][idx]})  # fmt: skip


def check_demo_store(cfg: TrainConfig) -> None:
    """`demos.path` recorded for another task or observation layout fails here, naming both sides, before any work
    (it used to fail minutes later inside the encoder with a tensor size mismatch)."""
    if not cfg.demos.path or not algorithm(cfg.algo).reads_demos:  # e.g. DSRL: its agent acts in noise space
        return
    where = f"demos.path={cfg.demos.path}"
    with EpisodeStore(cfg.demos.path, "r") as st:
        if not len(st):
            raise UserError(f"{where}: the store holds no episodes")
        tasks = sorted({str(t) for i in range(len(st)) if (t := st.meta(i).get("task"))})
        stored = {k: st.read(k, 0, 0).shape[1:] for k in st.keys}
        layouts = [st.meta(i).get("state_layout") for i in range(len(st))]
    if tasks and tasks != [cfg.env.task]:
        options = {task: name for name, task in task_names().items()}
        matching = ", ".join(f"task={options[t]}" for t in tasks if t in options) or "task="
        raise UserError(f"{where} holds {', '.join(tasks)} episodes but this run trains {cfg.env.task}: "
                        f"pick the matching {matching} or store")  # fmt: skip
    layout = env_layout(cfg)
    for fields in layouts:
        if (idx := state_fields(fields, layout.state, where)) is not None:
            stored["state"] = (len(idx),)
    wanted = {k: tuple(s.shape) for k, s in layout.observation_space().spaces.items()}
    for k, shape in wanted.items():
        if stored.get(k) != shape:
            have = f"stores {k} as {stored[k]}" if k in stored else f"has no {k!r} (it stores {', '.join(stored)})"
            raise UserError(f"{where} {have}, but {cfg.env.task} with obs={cfg.env.obs} image_size="
                            f"{cfg.env.image_size} observes {k} as {shape}")  # fmt: skip
