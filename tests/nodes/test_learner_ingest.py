"""The learner node behind a fleet faster than it trains: with real-time robots it takes their transitions in at
least every `ingest_every_s` and reports the replay ratio it reached; with lockstep ones it keeps sac.utd.

Counted in updates between polls, not in seconds: a loaded box makes each (sleeping) update longer, so fewer of them
fit a slice, and the bound holds whatever the load."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from robot_rl.config import load_config
from robot_rl.loop.learner import Learner
from robot_rl.nodes import learner_node
from robot_rl.nodes.links import LearnerLink
from robot_rl.types import Transition

UPDATE_S, BATCH, BATCHES = 0.03, 8, 20  # a learner that needs 8 x 0.03 s to keep up with each batch


class Fleet:
    """The learner's side of the plane, with a batch always waiting; notes how many updates each poll came after."""

    def __init__(self, state_dim: int, action_dim: int) -> None:
        obs = {"state": np.zeros(state_dim, np.float32)}
        t = Transition(obs, np.zeros(action_dim, np.float32), 0.0, obs, False, False)
        self.batch, self.left, self.polls, self.actors = [t] * BATCH, BATCHES, [], {}
        self.updates = 0

    def poll_batches(self, timeout_s: float = 0.0) -> list[tuple[str, list[Transition]]]:
        self.polls.append(self.updates)
        self.left -= 1
        return [("actor0", self.batch)] if self.left >= 0 else []

    def finish(self) -> None:
        pass


class Weights:
    def publish(self, state: dict, version: int) -> None:
        pass


@pytest.mark.parametrize("lockstep", [False, True])
def test_a_slow_learner_takes_real_time_robots_data_in_and_lowers_its_replay_ratio(
    lockstep: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fleets: list[Fleet] = []

    def update(self: Learner) -> None:
        time.sleep(UPDATE_S)
        self.updates += 1
        fleets[0].updates += 1

    @contextmanager
    def link(cfg, rank: int = 0) -> Iterator[LearnerLink]:  # noqa: ANN001
        fleets.append(Fleet(26, 4))  # the sim robot's proprio state and action
        yield LearnerLink(fleets[0], Weights(), list)

    monkeypatch.setattr(Learner, "update", update)
    monkeypatch.setattr(learner_node, "learner_link", link)
    cfg = load_config(["robot=sim", f"robot.lockstep={str(lockstep).lower()}", "intervention.enabled=false",
                       "demos.n_episodes=0", f"loop.env_steps={BATCH * BATCHES}", "loop.eval_every=0",
                       "loop.checkpoint_every=0", "threads=1", f"run_dir={tmp_path / 'run'}"])  # fmt: skip
    summary = json.loads(learner_node.run_learner(cfg).read_text())
    between = np.diff(fleets[0].polls[:BATCHES])  # updates between one batch taken and the next
    utd, slice_s = cfg.sac.utd, cfg.distributed.ingest_every_s
    assert summary["env_steps"] == BATCH * BATCHES
    print(f"\nlockstep={lockstep}: updates between polls {between.tolist()}, replay ratio {summary['replay_ratio']}")
    if lockstep:  # the robots wait for the learner's weights: every batch trained on at sac.utd first
        assert summary["replay_ratio"] == utd and (between == BATCH).all()
    else:  # the world does not wait: a poll after at most a slice of updates (and the one under way)
        assert between.max() <= int(slice_s / UPDATE_S) + 1 and summary["replay_ratio"] < 0.8 * utd
        assert summary["replay_ratio"] == pytest.approx(summary["updates"] * utd / summary["env_steps"], abs=1e-3)
