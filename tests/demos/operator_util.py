"""A scripted scene for the simulated operator, without a robot: a fake `RobotEnv` (what the operator reads of the
arm) and fake `Eyes` (what it sees), stepped together at 10 Hz. Imports only what the oracle had before
`intervention.operator` existed, so `fixtures/make_oracle_commands.py` records the oracle with any version."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np

from robot_rl.real.scene import Sight

HZ = 10.0
HOLE = np.array([0.5, 0.0, 0.05])


@dataclass
class Frame:
    tcp: np.ndarray
    sight: Sight
    gap: float = 0.08  # gripper opening, metres


@dataclass
class Scene:
    """Fake env and eyes at once: `frame` i is what is at robot time i / HZ."""

    frames: list[Frame]
    i: int = 0
    state_layout: dict = field(default_factory=lambda: {"tcp_pos": slice(0, 3), "gripper_opening": slice(3, 4)})
    cfg: SimpleNamespace = field(default_factory=lambda: SimpleNamespace(gripper_stroke=0.08))
    max_step: float = 0.02

    @property
    def unwrapped(self) -> Scene:
        return self

    @property
    def last_obs(self) -> dict:
        f = self.frames[self.i]
        return {"state": np.concatenate([f.tcp, [f.gap / 0.08]]).astype(np.float32)}

    def stamps(self) -> dict:
        return {"state_timestamp": self.i / HZ}

    def look(self, stamp: float) -> Sight:
        return self.frames[round(stamp * HZ)].sight

    def close(self) -> None:
        pass


def drifting(n: int, success_at: int | None = None, away: float = 0.01) -> Scene:
    """PickCube: the TCP moves `away` metres a step from a cube that lies still; the task looks done from
    frame `success_at` on."""
    cube = np.array([0.5, 0.0, 0.02])
    frames = [Frame(np.array([0.5 + away * i, 0.0, 0.2]), Sight(cube, success_at is not None and i >= success_at))
              for i in range(n)]  # fmt: skip
    return Scene(frames)


def random_walk(task: str, n: int, seed: int) -> Scene:
    """A reproducible wander of the TCP, the object (and for PegInsert the peg hanging, tilting, near the hole)
    and the success flag: a recorded trajectory to replay to any operator."""
    rng = np.random.default_rng(seed)
    tcp = np.array([0.5, 0.0, 0.15]) + np.cumsum(rng.normal(0, 0.01, (n, 3)), 0)
    success = np.cumsum(rng.random(n) < 0.08) % 2 == 1
    frames = []
    for i in range(n):
        if task == "PickCube":
            cube = np.array([0.5, 0.0, 0.02]) + rng.normal(0, 0.01, 3)
            frames.append(Frame(tcp[i], Sight(cube, bool(success[i])), gap=float(rng.uniform(0.03, 0.08))))
        else:
            peg = tcp[i] - [0, 0, 0.09] + rng.normal(0, 0.003, 3)
            quat = np.array([1.0, *rng.normal(0, 0.02, 3)])
            fixture = HOLE + rng.normal(0, 0.001, 3)
            frames.append(Frame(tcp[i], Sight(peg, bool(success[i]), quat / np.linalg.norm(quat), fixture)))
    return Scene(frames)


def replay(op, scene: Scene, episode: int = 25) -> list:
    """The operator's commands over the scene, a new episode every `episode` frames."""
    out = []
    for i in range(len(scene.frames)):
        if i % episode == 0:
            op.reset()
        scene.i = i
        out.append(op.poll(scene))
    return out


def as_rows(commands: list) -> list[list]:
    """Commands as JSON rows: twist (6), gripper, intervene, sorted events."""
    return [[*map(float, c.twist), float(c.gripper), bool(c.intervene), sorted(c.events)] for c in commands]
