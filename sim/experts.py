"""Scripted experts and a simulated human intervener for the sim tasks.

The expert is a reactive state machine over the env's privileged `sim_state()`: every action is
recomputed from the current state, so it can take over mid-episode from wherever a policy left the
arm (cube dropped, gripper closed on nothing, peg stuck beside the hole, ...).
"""

from __future__ import annotations

from collections import deque
from typing import Any

import gymnasium as gym
import numpy as np

from robot_rl.sim.config import TRIGGERS, InterventionConfig
from robot_rl.sim.envs import FINGER_OPEN, INSERT_DEPTH

GRIP_CLOSE, GRIP_OPEN = 1.0, -1.0


class ScriptedExpert:
    """Privileged-state controller for PickCube and PegInsert, acting in the env's action convention."""

    def __init__(self, noise_std: float = 0.0, seed: int | None = None) -> None:
        self.noise_std = noise_std
        self._rng = np.random.default_rng(seed)

    def reset(self) -> None:
        """Nothing to clear: the expert keeps no memory between steps, which is what makes takeover safe."""

    def act(self, env: gym.Env, state: dict[str, Any] | None = None) -> np.ndarray:
        """The action for `state` (default: the env's live `sim_state()`), applied by the env to the live arm."""
        u = env.unwrapped
        s = u.sim_state() if state is None else state
        if u.task == "PickCube":
            goal, grip = self._pick_cube(s)
        elif u.task == "PegInsert":
            goal, grip = self._peg_insert(s)
        else:  # other backends' tasks (sim/maniskill.py) bring their expert as (TCP goal, gripper)
            goal, grip = u.expert_goal(s)
        move = np.clip((goal - s["tcp"]) / s["max_step"], -1.0, 1.0)
        parts = [move]
        if s["yaw_control"]:
            parts.append([self._yaw_action(s)])
        parts.append([grip])
        a = np.concatenate(parts)
        if self.noise_std > 0.0:
            a[:-1] += self._rng.normal(0.0, self.noise_std, a.size - 1)
        return np.clip(a, -1.0, 1.0).astype(np.float32)

    @staticmethod
    def _yaw_action(s: dict[str, Any]) -> float:
        if s["grasped"]:
            return 0.0
        # The cube looks the same every quarter turn: aim for the nearest equivalent yaw.
        err = (s["object_yaw"] - s["ee_yaw"] + np.pi / 4) % (np.pi / 2) - np.pi / 4
        return float(np.clip(err / s["max_yaw_step"], -1.0, 1.0))

    @staticmethod
    def _pick_cube(s: dict[str, Any]) -> tuple[np.ndarray, float]:
        """Needs `object_half` (the cube's half-extents) and `lift_z` (the centre height that counts as lifted)."""
        tcp, cube = s["tcp"], s["object_pos"]
        dxy = float(np.linalg.norm(cube[:2] - tcp[:2]))
        height = tcp[2] - cube[2]
        if s["grasped"]:
            return np.array([tcp[0], tcp[1], s["lift_z"] + 0.03]), GRIP_CLOSE
        if s["gripper_closed_cmd"] and s["gripper_gap"] < 2 * min(s["object_half"][:2]) - 0.01:
            # Closed on nothing: open and back off upwards before trying again.
            return np.array([tcp[0], tcp[1], cube[2] + 0.05]), GRIP_OPEN
        if dxy < 0.008 and height < 0.006:
            return np.array([cube[0], cube[1], cube[2]]), GRIP_CLOSE
        if height < 0.03 and dxy > 0.02:
            # Low and off to the side: rise first so the fingers do not sweep the cube away.
            return np.array([tcp[0], tcp[1], cube[2] + 0.05]), GRIP_OPEN
        if s["gripper_gap"] < 2 * FINGER_OPEN - 0.01 and height < 0.05:
            # Fingers not open yet: wait above the cube while they open.
            return np.array([cube[0], cube[1], max(tcp[2], cube[2] + 0.04)]), GRIP_OPEN
        clearance = float(np.clip(2.0 * (dxy - 0.005), 0.0, 0.05))
        return np.array([cube[0], cube[1], cube[2] + clearance]), GRIP_OPEN

    @staticmethod
    def _peg_insert(s: dict[str, Any]) -> tuple[np.ndarray, float]:
        tcp, pb, ht = s["tcp"], s["peg_bottom"], s["hole_top"]
        off = ht[:2] - pb[:2]
        lateral = float(np.abs(off).max())
        above = pb[2] - ht[2]
        if lateral > 0.004 and above < 0.008:
            # Misaligned at or below the hole top (on the block or beside it): back off upwards.
            return np.array([tcp[0], tcp[1], tcp[2] + (0.015 - above)]), GRIP_CLOSE
        if lateral > 0.002 and above > 0.008:
            # Align above the hole, descending only to just above its rim.
            dz = max(0.012 - above, -0.025) if lateral < 0.02 else max(0.03 - above, -0.025)
            return np.array([tcp[0] + off[0], tcp[1] + off[1], tcp[2] + dz]), GRIP_CLOSE
        depth_goal = ht[2] - INSERT_DEPTH - 0.005
        return np.array([tcp[0] + off[0], tcp[1] + off[1], tcp[2] + max(depth_goal - pb[2], -0.015)]), GRIP_CLOSE


class ExpertPolicy:
    """The scripted expert behind the policy interface (`select_action`, `reset`), e.g. for
    `robot_rl.evaluation.rollout`: a control row in benchmarks, the solvability check in tests.

    `stale_view`: the expert reads the state as it was the episode's `obs_delay` control steps ago, the view a
    policy gets under observation delay, while its actions still move the live arm. The live expert shows that a
    shift's physics is solvable; the stale one, what a memoryless controller can do with the policy's late view.
    """

    def __init__(self, env: gym.Env, stale_view: bool = False) -> None:
        self.env, self.expert, self.stale_view = env, ScriptedExpert(), stale_view
        self._views: deque[dict[str, Any]] = deque()

    def select_action(self, obs: Any, deterministic: bool = False) -> np.ndarray:
        if not self.stale_view:
            return self.expert.act(self.env)
        u = self.env.unwrapped
        self._views.append(u.sim_state())
        while len(self._views) > u.obs_delay + 1:  # until then the oldest is the reset state, as the env's queue
            self._views.popleft()
        return self.expert.act(self.env, self._views[0])

    def reset(self) -> None:
        self.expert.reset()
        self._views.clear()


def goal_distance(s: dict[str, Any]) -> float:
    """Task potential (metres-like): lower is closer to success; jumps up when an object is dropped."""
    if "goal_distance" in s:  # envs of other backends compute their task's own
        return float(s["goal_distance"])
    if "peg_bottom" in s:
        rel = s["hole_top"] - s["peg_bottom"]
        return float(np.linalg.norm(rel[:2]) + abs(-rel[2] + INSERT_DEPTH) + (0.0 if s["grasped"] else 0.1))
    lift = s["lift_z"] - s["table_z"] - s["object_half"][2]
    if s["grasped"]:
        return float(max(0.0, s["lift_z"] - s["object_pos"][2]))
    return float(np.linalg.norm(s["object_pos"] - s["tcp"]) + lift)


class SimulatedHuman:
    """A SpaceMouse operator stand-in: watches the policy, takes over with the expert when it goes wrong.

    Call `set_progress(env_steps)` from the training loop (otherwise its own call count is used) so the
    intervention probability decays as training advances, like a person who trusts the policy more.
    """

    def __init__(self, cfg: InterventionConfig, seed: int | None = None) -> None:
        if cfg.trigger not in TRIGGERS:
            raise ValueError(f"unknown trigger {cfg.trigger!r}; expected one of {TRIGGERS}")
        self.cfg = cfg
        self.expert = ScriptedExpert(cfg.expert_noise, seed)
        self._rng = np.random.default_rng(seed)
        self.progress = 0
        self.total_steps = 0
        self.intervened_steps = 0
        self.interventions = 0
        self.reset()

    def reset(self) -> None:
        """Start of an episode: forget the watch state, keep the lifetime statistics."""
        self._takeover_left = 0
        self._streak = 0
        self._prev_dist: float | None = None
        self._prev_grasped = False
        self.expert.reset()

    def set_progress(self, env_steps: int) -> None:
        self.progress = env_steps

    @property
    def rate(self) -> float:
        """Current probability of stepping in when the trigger fires."""
        c = self.cfg
        if c.decay_steps <= 0:
            return c.max_rate
        frac = min(1.0, self.progress / c.decay_steps)
        return c.max_rate + (c.min_rate - c.max_rate) * frac

    @property
    def intervention_rate(self) -> float:
        """Fraction of all watched steps in which the human drove."""
        return self.intervened_steps / max(1, self.total_steps)

    def stats(self) -> dict[str, float]:
        return {
            "intervention_rate": self.intervention_rate,
            "interventions": float(self.interventions),
            "intervened_steps": float(self.intervened_steps),
            "total_steps": float(self.total_steps),
            "takeover_prob": self.rate,
        }

    def __call__(self, env: gym.Env, policy_action: np.ndarray) -> tuple[np.ndarray, bool]:
        self.total_steps += 1
        self.progress += 1
        if not self.cfg.enabled:
            return policy_action, False
        s = env.unwrapped.sim_state()
        triggered = self._watch(s)
        if self._takeover_left == 0 and triggered and self._rng.random() < self.rate:
            self._takeover_left = self.cfg.takeover_steps
            self.interventions += 1
        if self._takeover_left == 0:
            return policy_action, False
        self._takeover_left -= 1
        if self._takeover_left == 0:
            self._streak = 0  # hand back with a clean slate: give the policy `patience` steps again
        self.intervened_steps += 1
        return self.expert.act(env), True

    def _watch(self, s: dict[str, Any]) -> bool:
        """Update the watch state with the latest sim state; True when the trigger rule fires."""
        if self.cfg.trigger == "always":
            return True
        dist = goal_distance(s)
        dropped = self._prev_grasped and not s["grasped"] and not s["success"]
        self._prev_grasped = s["grasped"]
        prev, self._prev_dist = self._prev_dist, dist
        if prev is None:
            return False
        tol = self.cfg.progress_tol
        if self.cfg.trigger == "away_from_goal":
            if dist > prev + tol:
                self._streak += 1
            elif dist < prev - tol:
                self._streak = 0
        elif dist < prev - tol:
            self._streak = 0
        else:
            self._streak += 1
        if dropped or self._streak >= self.cfg.patience:
            self._streak = 0
            return True
        return False
