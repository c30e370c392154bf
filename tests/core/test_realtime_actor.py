"""`ActorThread` (loop/realtime.py) on a toy env that takes 10 ms a step: parking waits for the episode's end,
weights load between steps, and what ends the actor reaches the learner's thread."""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np
import pytest
import torch

from robot_rl.loop.actor import Actor
from robot_rl.loop.realtime import ActorThread

pytestmark = pytest.mark.realtime

EPISODE = 5


class Clocked(gym.Env):
    """A 5-step episode; each step takes 10 ms (an arm's control period, shortened); `fail_at` raises."""

    observation_space = gym.spaces.Dict({"state": gym.spaces.Box(-1, 1, (1,))})
    action_space = gym.spaces.Box(-1, 1, (1,))

    def __init__(self, fail_at: int = -1) -> None:
        self.t, self.steps, self.fail_at = 0, 0, fail_at

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return {"state": np.zeros(1, np.float32)}, {}

    def step(self, action):
        time.sleep(0.01)
        self.t, self.steps = self.t + 1, self.steps + 1
        if self.steps == self.fail_at:
            raise RuntimeError("the driver went away")
        return {"state": np.full(1, self.t, np.float32)}, 0.0, False, self.t == EPISODE, {"success": False}


class Constant(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.value = torch.nn.Parameter(torch.zeros(1))

    def select_action(self, obs, deterministic: bool = False) -> np.ndarray:
        return self.value.detach().numpy().copy()

    def reset(self) -> None:
        pass


def test_park_waits_for_the_episode_end_and_weights_load_between_steps() -> None:
    arm = ActorThread(Actor(Clocked(), Constant()))
    try:
        got = arm.take(timeout_s=1.0)
        while len(got) < 2:
            got += arm.take(timeout_s=1.0)
        arm.push({"value": torch.ones(1)}, version=7)
        arm.park()  # mid-episode: returns only once the actor's episode has ended
        got += arm.take()
        assert got[-1][0].truncated and got[-1][1] is not None and got[-1][1].length == EPISODE
        assert [t.action[0] for t, _ in got][-1] == 1.0 and arm.actor.policy_version == 7
        time.sleep(0.05)
        assert arm.take() == []  # parked: the env is free for an evaluation
        arm.resume()
        more = arm.take(timeout_s=1.0)
        assert more[0][0].obs["state"][0] == 0.0  # a new episode, from its reset
    finally:
        arm.close()


def test_what_ends_the_actor_is_raised_in_the_learners_thread_after_what_it_made() -> None:
    arm = ActorThread(Actor(Clocked(fail_at=3), Constant()))
    try:
        time.sleep(0.2)
        assert len(arm.take()) == 2
        with pytest.raises(RuntimeError, match="the driver went away"):
            arm.take()
        with pytest.raises(RuntimeError, match="the driver went away"):
            arm.park()
    finally:
        arm.close()
