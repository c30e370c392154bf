"""A teleop device in the training loop (`loop.human.DeviceIntervener`): while its intervene toggle is on its
command is the action and the step goes to both buffers; its success / failure keys override the reward."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from robot_rl.buffers import ReplayBuffer
from robot_rl.config import load_config
from robot_rl.demos.teleop import DeviceCommand
from robot_rl.envs import make_env
from robot_rl.errors import UserError
from robot_rl.loop.actor import Actor
from robot_rl.loop.human import DeviceIntervener, make_human
from robot_rl.loop.learner import Learner
from robot_rl.sim.config import EnvConfig


class Script:
    """A device whose person takes over on steps 2-4 (pushing +x) and presses `key` on step `key_at`."""

    name, source = "script", "teleop"

    def __init__(self, key: str, key_at: int) -> None:
        self.key, self.key_at, self.t = key, key_at, 0

    def reset(self) -> None:
        self.t = 0

    def poll(self, env) -> DeviceCommand:
        t, self.t = self.t, self.t + 1
        events = frozenset({self.key}) if t == self.key_at else frozenset()
        return DeviceCommand(np.float32([1, 0, 0, 0, 0, 0]), -1.0, 2 <= t <= 4, events)

    def close(self) -> None:
        pass


class Still:
    """A policy that always holds still."""

    def select_action(self, obs) -> np.ndarray:
        return np.zeros(4, np.float32)

    def reset(self) -> None:
        pass


def episode(key: str, keys: bool) -> tuple[list, Actor]:
    env = make_env(EnvConfig(max_episode_steps=12), seed=0)
    actor = Actor(env, Still(), DeviceIntervener(Script(key, key_at=6), keys=keys))
    out = [actor.step()]
    while not out[-1].done:
        out.append(actor.step())
    return out, actor


def test_takeover_steps_are_the_devices_actions_and_land_in_both_buffers() -> None:
    steps, _ = episode("success", keys=False)
    assert [t.intervened for t in steps[:6]] == [False, False, True, True, True, False]
    np.testing.assert_array_equal(steps[2].action, [1, 0, 0, -1])
    np.testing.assert_array_equal(steps[5].action, [0, 0, 0, 0])
    assert len(steps) == 12 and steps[-1].truncated and sum(t.reward for t in steps) == 0.0  # keys off: ignored
    algo = SimpleNamespace(cfg=SimpleNamespace(batch_size=4, demo_ratio=0.5))  # `add` needs no update
    learner = Learner(algo, ReplayBuffer(64), ReplayBuffer(64))
    for t in steps:
        learner.add(t)
    assert learner.online.n_added == 12 and learner.demo.n_added == 3
    assert learner.demo.step["intervened"][: learner.demo.n_added].all()


@pytest.mark.parametrize(("key", "reward", "terminated"), [("success", 1.0, True), ("failure", 0.0, False)])
def test_a_persons_key_overrides_the_reward_and_ends_the_episode(key, reward, terminated) -> None:
    steps, actor = episode(key, keys=True)
    assert len(steps) == 7  # the key was pressed on the 7th step
    last = steps[-1]
    assert (last.reward, last.terminated, last.truncated) == (reward, terminated, not terminated)
    assert actor.last_episode.success == terminated  # the person's verdict is the outcome (a cell may have no other)
    assert all(t.reward == 0.0 for t in steps[:-1])


def test_who_intervenes_is_chosen_in_the_config() -> None:
    assert type(make_human(load_config([]), 0)).__name__ == "SimulatedHuman"
    assert make_human(load_config(["intervention.enabled=false"]), 0) is None
    with pytest.raises(UserError, match="intervention.device=simulated watches the sim robot"):
        load_config(["intervention.device=simulated"])
    with pytest.raises(UserError, match="intervention.device=joystick: expected one of"):
        load_config(["intervention.device=joystick"])
