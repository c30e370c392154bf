"""Who acts besides the policy (`intervention.*`): the simulated human in sim, a teleop device, or nobody.

One factory for the in-process trainer and the actor node. An intervener is called with (env, policy action) before
each step and returns (executed action, whether the person acted); a device intervener also holds the person's
verdict on the step (`verdict`: their success / failure key), which the actor applies over the reward.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import gymnasium as gym
import numpy as np

from robot_rl.demos.teleop import TeleopDevice, make_device, to_action
from robot_rl.errors import UserError
from robot_rl.sim.experts import SimulatedHuman

if TYPE_CHECKING:
    from robot_rl.config import TrainConfig


class DeviceIntervener:
    """A teleop device in the training loop: while its intervene toggle is on, its command is the action.

    `keys`: its success / failure keys are the person's verdict on the step (`verdict`), read by the actor after
    the step: success ends the episode with reward 1, failure ends it (truncated) with reward 0. Counted or not, the
    keys also set what the person says of the scene (`label`, as `collect --label-frames` records it: on from the
    success key, off from the failure key), which `judge` reports for the frames a success classifier pays for."""

    def __init__(self, device: TeleopDevice, keys: bool = True, verdict_s: float = 0.0) -> None:
        """`verdict_s`: how long `judge` waits for the success key (a person's reaction; 0: one look)."""
        self.device, self.keys, self.verdict_s = device, keys, verdict_s
        self.verdict: str | None = None
        self.label = False
        self.pressed: frozenset[str] = frozenset()  # the keys of the latest poll, counted or not

    def reset(self) -> None:
        self.device.reset()
        self.verdict = None
        self.label = False
        self.pressed = frozenset()

    def _read_label(self, events: frozenset[str]) -> None:
        if {"success", "failure"} & events:
            self.label = "success" in events

    def judge(self, env: gym.Env) -> bool:
        """Whether the person says the task is done in the scene as it is now (a classifier ended the episode, so
        there is no next step to read the keys at): the label their keys set, or the success key pressed within
        `verdict_s`; no key in that time is a no. A simulated person (`SimulatedOperator.ask`) is asked outright."""
        if hasattr(self.device, "ask"):
            self.device.ask()
        end = time.monotonic() + self.verdict_s
        while True:
            self._read_label(self.device.poll(env).events)
            if self.label or time.monotonic() >= end:
                return self.label
            time.sleep(0.02)

    def set_progress(self, env_steps: int) -> None:
        """A person keeps their own sense of how training goes (the simulated operator counts its own steps)."""

    def __call__(self, env: gym.Env, policy_action: np.ndarray) -> tuple[np.ndarray, bool]:
        cmd = self.device.poll(env)
        self._read_label(cmd.events)
        self.pressed = cmd.events
        said = [e for e in ("success", "failure") if e in cmd.events] if self.keys else []
        self.verdict = said[0] if said else None
        if cmd.intervene:
            return to_action(cmd, len(policy_action)), True
        return policy_action, False

    def close(self) -> None:
        self.device.close()


def make_human(cfg: TrainConfig, seed: int, node_name: str = "robot_rl_operator") -> object | None:
    """The run's intervener: None, the simulated human (sim), or a `DeviceIntervener` around the named device."""
    c = cfg.intervention
    if not c.enabled:
        return None
    if not c.device:  # robot runs name a device (`robot_rl.config.check_config`)
        return SimulatedHuman(c, seed=seed)
    if c.device == "simulated":
        from robot_rl.demos.teleop.simulated import SimulatedOperator
        from robot_rl.real.scene import SceneWatcher

        eyes = SceneWatcher(cfg.robot, node_name=node_name, fixture=cfg.env.task == "PegInsert")
        device = SimulatedOperator(eyes, c, seed, person=c.person if c.operator == "person" else None)
    else:
        try:
            device = make_device(c.device, seed)
        except ValueError as e:
            raise UserError(f"intervention.device={c.device}: {e}") from None
    # The simulated operator answers at once (a simulated person too: the robot holds while they judge); a person
    # gets `reward.verdict_s` to press the success key.
    return DeviceIntervener(
        device, keys=cfg.keys_count, verdict_s=0.0 if c.device == "simulated" else cfg.reward.verdict_s
    )
