"""A simulated operator at the robot: drives PickCube or PegInsert, labels success and takes over from a policy, all
through the teleop device interface, the way a person with a SpaceMouse would.

What it knows: the robot's state as the env last observed it (`env.unwrapped.last_obs`: TCP, gripper opening) and
what its `eyes` see (a `Sight`: where the cube or peg is, where the hole is, whether the task looks done;
`real.scene.SceneWatcher` on the sim robot). An insertion is whatever its eyes see a fixture for. Per poll:
- drive: the scripted strategy from that (whether the cube is grasped is inferred, not read: the gripper was told
  to close and stopped at about the cube's width; the peg is held where it hangs below the hand);
- label: it presses the success key when the task starts to look done and the failure key when it stops (the cube
  fell), so collection records a person's verdict per frame and training can take it as an override;
- show failures (`wander` steps at the start of each episode): it first moves to a random pose above the table with
  a random gripper opening (the peg: to a random spot just above the block, beside or over the hole), as a person
  labelling frames shows the camera what "not done" looks like (a gripper closed on nothing, lifted; a peg at the
  rim), so a classifier learns those are no success (a policy will visit them);
- intervene: it watches the goal distance and toggles "intervene" on when the policy goes wrong (the
  `InterventionConfig` rule of the sim's simulated human: away from the goal, or no progress, for `patience` steps,
  or a drop; and at once at a jam, the peg pressed on the block beside the hole, as a person steps in the moment
  they see one), for `takeover_steps`, with a probability that decays over its own count of watched steps.

An oracle by default: it sees exact poses and the simulator's success flag and takes over the step it is triggered.
`person` gives it a person's limits (`PersonConfig`): its eyes are `PersonEyes` (estimated poses, late and
sometimes wrong verdicts), it misses a trigger with probability `miss_rate` and takes over `reaction_s` of robot
time after one it noticed, the policy acting meanwhile.
"""

from __future__ import annotations

from typing import Any, Protocol

import gymnasium as gym
import numpy as np

from robot_rl.demos.teleop.base import DeviceCommand
from robot_rl.demos.teleop.person import PersonEyes
from robot_rl.sim.config import PersonConfig
from robot_rl.sim.envs import LIFT_HEIGHT, PEG_BELOW_TCP
from robot_rl.sim.experts import InterventionConfig, ScriptedExpert, goal_distance


class Eyes(Protocol):
    def look(self, stamp: float) -> Any:
        """A `Sight` (object_pos, success) at robot time `stamp` or later."""

    def close(self) -> None: ...


CUBE_HALF = 0.02  # sim/assets/pick_cube.xml's cube on a table at z = 0: what this operator assumes of the cell
PEG_HALF_LENGTH = 0.05  # sim/assets/peg_insert.xml's peg, likewise
# A jam as a person sees it: the peg's bottom down at the block's top (within JAM_HEIGHT) but off the hole's centre
# by more than JAM_OFFSET, twice the 1.5 mm clearance of the tightest hole: on the rim or the face, not going in.
JAM_HEIGHT, JAM_OFFSET = 0.002, 0.003


class SimulatedOperator:
    """The scripted PickCube strategy on observable state; intervenes by `cfg` (None: never); `person`: with a
    person's limits (None: an oracle)."""

    name = "simulated"
    source = "teleop"  # a stand-in for a person at the robot

    def __init__(
        self,
        eyes: Eyes,
        cfg: InterventionConfig | None = None,
        seed: int | None = None,
        wander: int = 0,
        person: PersonConfig | None = None,
    ) -> None:
        self.cfg = cfg
        self.wander = wander
        self.person = person
        self._rng = np.random.default_rng(seed)
        # The person's draws on a stream of their own: the oracle's stay what they were.
        self._person_rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(1,)))
        self.eyes = PersonEyes(eyes, person, self._person_rng) if person is not None else eyes
        self.watched = 0  # polls so far: its own sense of how far training has come
        self._grip = -1.0
        self._intervene = False
        self.reset()

    @property
    def operator(self) -> str:
        """What a run's summary and a store's episodes call it."""
        return "oracle" if self.person is None else "person"

    def reset(self) -> None:
        self._grip = -1.0
        self._saw_success = False
        self._takeover_left = 0
        self._react_at: float | None = None  # robot time the takeover starts at, once triggered and noticed
        self._streak = 0
        self._prev: tuple[float, bool] | None = None  # (goal distance, grasped) at the previous poll
        self._t = 0
        # Where this episode's wandering goes, as fractions of a task's range: `_wander_goal`.
        self._wander_u = self._rng.random(4)
        if self.person is not None:
            self.eyes.reset()

    def ask(self) -> None:
        """The next poll answers whether the held scene is done (`DeviceIntervener.judge`): a person judges it
        afresh (`PersonEyes.ask`); the oracle's keys already say."""
        if self.person is not None:
            self.eyes.ask()

    def poll(self, env: gym.Env) -> DeviceCommand:
        u = env.unwrapped
        obs, layout = getattr(u, "last_obs", None), getattr(u, "state_layout", {})
        if obs is None or not {"tcp_pos", "gripper_opening"} <= set(layout) or not hasattr(u, "stamps"):
            raise ValueError("the simulated operator needs a robot env (RobotEnv) observing tcp_pos and "
                             "gripper_opening")  # fmt: skip
        now = u.stamps()["state_timestamp"]
        sight = self.eyes.look(now)
        s = obs["state"]
        tcp = s[layout["tcp_pos"]].astype(np.float64)
        if sight.fixture_pos is None:
            gap = float(s[layout["gripper_opening"]][0]) * u.cfg.gripper_stroke  # metres, whatever the joint reads
            state = self._pick_cube_state(tcp, np.asarray(sight.object_pos, np.float64), gap)
            goal, grip = ScriptedExpert._pick_cube(state)
        else:
            state = self._peg_state(tcp, sight)
            goal, grip = ScriptedExpert._peg_insert(state)
        self._t += 1
        if self._t <= self.wander:
            goal, grip = self._wander_goal(state)
        self._grip = float(grip)
        twist = np.zeros(6, np.float32)
        twist[:3] = np.clip((goal - tcp) / u.max_step, -1.0, 1.0)
        events = self._keys(sight.success)
        dist = goal_distance({**state, "success": sight.success})
        self._intervene = self._watch(dist, state["grasped"], sight.success, state.get("jammed", False), now)
        return DeviceCommand(twist, float(grip), self._intervene, events)

    def _pick_cube_state(self, tcp: np.ndarray, cube: np.ndarray, gap: float) -> dict[str, Any]:
        closed = self._grip > 0
        near = np.linalg.norm(cube - tcp) < 0.02
        grasped = closed and near and 2 * CUBE_HALF - 0.01 <= gap <= 2 * CUBE_HALF + 0.01
        return {"tcp": tcp, "object_pos": cube, "grasped": grasped, "gripper_closed_cmd": closed, "gripper_gap": gap,
                "object_half": np.full(3, CUBE_HALF), "lift_z": CUBE_HALF + LIFT_HEIGHT, "table_z": 0.0}  # fmt: skip

    @staticmethod
    def _peg_state(tcp: np.ndarray, sight: Any) -> dict[str, Any]:
        """The peg's bottom from its pose (it may tilt in the grip), held while it hangs about where it was grasped."""
        w, x, y, z = np.asarray(sight.object_quat, np.float64)
        axis = np.array([2 * (x * z + w * y), 2 * (y * z - w * x), 1 - 2 * (x * x + y * y)])  # the peg's own z
        peg = np.asarray(sight.object_pos, np.float64)
        below = tcp[2] - peg[2]
        grasped = np.abs(peg[:2] - tcp[:2]).max() < 0.015 and abs(below - PEG_BELOW_TCP) < 0.02
        bottom, hole = peg - PEG_HALF_LENGTH * axis, np.asarray(sight.fixture_pos, np.float64)
        jammed = bottom[2] < hole[2] + JAM_HEIGHT and np.linalg.norm(bottom[:2] - hole[:2]) > JAM_OFFSET
        return {"tcp": tcp, "peg_bottom": bottom, "hole_top": hole, "grasped": bool(grasped),
                "jammed": bool(jammed)}  # fmt: skip

    def _wander_goal(self, state: dict[str, Any]) -> tuple[np.ndarray, float]:
        """This episode's failure pose: PickCube x, y around the home pose, z well above the cube, any gripper; the
        peg's bottom up to 4 cm beside the hole's centre, 3 mm to 6 cm above its top (never pressed on the block)."""
        u = self._wander_u
        if "peg_bottom" not in state:
            lo, hi = np.array([-0.12, -0.12, 0.08]), np.array([0.12, 0.12, 0.2])
            return np.array([0.5, 0.0, 0.0]) + lo + u[:3] * (hi - lo), float(2.0 * u[3] - 1.0)
        lo, hi = np.array([-0.04, -0.04, 0.003]), np.array([0.04, 0.04, 0.06])
        bottom = state["hole_top"] + lo + u[:3] * (hi - lo)
        return state["tcp"] + bottom - state["peg_bottom"], 1.0

    def _keys(self, success: bool) -> frozenset[str]:
        """Success key when the task starts to look done, failure key when it stops looking so."""
        saw, self._saw_success = self._saw_success, success
        if success != saw:
            return frozenset({"success" if success else "failure"})
        return frozenset()

    def _watch(self, dist: float, grasped: bool, success: bool, jammed: bool = False, now: float = 0.0) -> bool:
        """True while taking over: triggered by `patience` steps away from the goal, a drop or a jam, then held for
        `takeover_steps`, stepping in with probability `rate` (a person: if they notice, `reaction_s` after; robot
        time `now`)."""
        self.watched += 1
        if self.cfg is None or not self.cfg.enabled:
            return False
        if self._takeover_left > 0:
            self._takeover_left -= 1
            if self._takeover_left == 0:
                self._streak, self._prev = 0, None  # hand back with a clean slate
            return True
        if self._react_at is not None:  # reaching for the device: the policy acts, new triggers wait
            return self._react(now)
        prev, self._prev = self._prev, (dist, grasped)
        if prev is None:
            return False
        dropped = prev[1] and not grasped and not success
        tol, trigger = self.cfg.progress_tol, self.cfg.trigger
        if dist < prev[0] - tol:
            self._streak = 0
        elif trigger == "always" or dist > prev[0] + tol or trigger == "no_progress":
            self._streak += 1
        if (dropped or jammed or self._streak >= self.cfg.patience) and self._rng.random() < self.rate:
            self._streak = 0
            if self.person is None:
                self._react_at = now
            elif self._person_rng.random() >= self.person.miss_rate:  # else it passes unnoticed
                self._react_at = now + self.person.reaction_s
        return self._react(now)

    def _react(self, now: float) -> bool:
        """Start the takeover once its time has come."""
        if self._react_at is None or now < self._react_at - 1e-9:
            return False
        self._react_at = None
        self._takeover_left = self.cfg.takeover_steps - 1
        return True

    @property
    def rate(self) -> float:
        """Probability of stepping in when triggered: decays linearly over `decay_steps` watched steps."""
        c = self.cfg
        if c is None or c.decay_steps <= 0:
            return c.max_rate if c is not None else 0.0
        return c.max_rate + (c.min_rate - c.max_rate) * min(1.0, self.watched / c.decay_steps)

    def close(self) -> None:
        self.eyes.close()
