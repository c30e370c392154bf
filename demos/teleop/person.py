"""A person's eyes for the simulated operator (`intervention.operator=person`): what a person standing beside the
robot makes of the scene, instead of the simulator's exact state.

- Poses: the object's and the fixture's positions are estimates, off by a per-episode bias shared by both (where
  the person thinks the scene is) plus a small per-look jitter of each (relative alignment is much finer). The
  orientation is left exact.
- Success: what the person believes, not the simulator's flag. Each change of the flag is judged
  `verdict_delay_s` later, wrongly with probability `verdict_error`: a success that came is missed, or one that
  went (the cube fell) still called a success. Asked about a held scene (`ask`: a classifier ended the episode
  and the robot waits for the answer), they judge it afresh, as wrongly as ever, with no wait in robot time.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from robot_rl.sim.config import PersonConfig


class PersonEyes:
    """Wraps any `Eyes` (`look(stamp) -> Sight`); `rng` draws the biases, jitter and errors (seeded by the caller)."""

    def __init__(self, eyes: Any, cfg: PersonConfig, rng: np.random.Generator) -> None:
        self.eyes, self.cfg, self._rng = eyes, cfg, rng
        self.reset()

    def reset(self) -> None:
        """A new episode: a new bias, and the scene not done, believed so."""
        self._bias = self._rng.normal(0.0, self.cfg.pose_noise_m, 3)
        self._truth = self._belief = self._asked = False
        self._pending: list[tuple[float, bool]] = []  # (robot time the verdict arrives, verdict)

    def ask(self) -> None:
        """The next look answers whether the held scene is done."""
        self._asked = True

    def look(self, stamp: float) -> Any:
        sight = self.eyes.look(stamp)
        fixture = None if sight.fixture_pos is None else self._estimate(sight.fixture_pos)
        return dataclasses.replace(sight, object_pos=self._estimate(sight.object_pos), fixture_pos=fixture,
                                   success=self._judge(bool(sight.success), stamp))  # fmt: skip

    def _estimate(self, pos: np.ndarray) -> np.ndarray:
        return np.asarray(pos, np.float64) + self._bias + self._rng.normal(0.0, self.cfg.pose_jitter_m, 3)

    def _verdict(self, truth: bool) -> bool:
        return truth != (self._rng.random() < self.cfg.verdict_error)

    def _judge(self, truth: bool, stamp: float) -> bool:
        """What the person believes at robot time `stamp`: their verdicts on the scene's changes, once they arrive."""
        if self._asked:
            self._asked, self._pending = False, []
            self._belief = self._verdict(truth)
        elif truth != self._truth:
            self._pending.append((stamp + self.cfg.verdict_delay_s, self._verdict(truth)))
        self._truth = truth
        while self._pending and self._pending[0][0] <= stamp + 1e-9:
            self._belief = self._pending.pop(0)[1]
        return self._belief

    def close(self) -> None:
        self.eyes.close()
