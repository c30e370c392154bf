"""Franka Panda manipulation envs (PickCube, PegInsert) with end-effector delta control.

Control: the action moves a target pose (a mocap body) relative to the measured TCP; the arm follows it through a
Cartesian impedance controller with force and torque limits (`arm=osc`) or a weld (`arm=mocap`), see
sim/assets/panda.xml. With `env.for_robot` a robot's safety limits cut every command (target, orientation, gripper)
as that robot's safety layer will (`robot_rl.limits.Limiter`); the action stays as it is.
One env step is `n_substeps` `mj_step` calls, each followed by a copy of the contact sensors
(sim/contacts.py), so the Python cost per step stays well below the physics cost. `info` carries `success`,
`safety_failure` (the end-effector force limit tripped; the episode ends, rewarded `safety_reward`; other steps
short of success pay `force_cost`) and the episode's contact peaks.

Observation layout of `obs["state"]` (float32), in order; `state_layout` on the env gives the slices:
  tcp_pos (3), [ee_yaw_sin_cos (2) if yaw], gripper_opening (1, 0 closed .. 1 open), tcp_vel (3, m/s),
  [with obs=pixels and env.for_robot instead that robot's cell: `robot_rl.types.cell_state`, joints included],
  [ee_force (3, the world's force on the hand in units of 10 N) with randomization.observe_force],
  [last_actions (action_history x action dim, newest first) with randomization.action_history],
  then in `state`/`both` obs modes only the privileged object state:
  PickCube:  cube_pos (3), cube_minus_tcp (3), [cube_yaw4_sin_cos (2) if yaw: sin/cos of 4*yaw, the
             cube's symmetry-invariant yaw]
  PegInsert: peg_bottom (3), hole_top (3), hole_minus_peg_bottom (3)
With `obs_frame=relative` (state/both modes) nothing absolute is left, so a raised table or a far start looks like
the nominal scene: `tcp_pos` becomes `tcp_minus_cube_start` (the TCP relative to where the cube was observed at
reset) or `tcp_minus_hole_top`, `cube_pos` becomes `cube_minus_start` (the cube's displacement since reset: its
lift), and PegInsert drops `peg_bottom` and `hole_top`. A real cell computes all of them from its tracker.
Cameras appear as uint8 (H, W, 3) entries named after the camera.

PegInsert starts with the peg already grasped and keeps the gripper closed whatever the last action
dimension says (as in HIL-SERL insertion tasks), so the policy only learns the contact-rich motion.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import mujoco
import numpy as np

from robot_rl.limits import Limiter, SafetyConfig
from robot_rl.sim.config import (
    ARMS,
    EPISODE_STEPS,
    HELD_GRIP,
    OBS_FRAMES,
    OBS_MODES,
    SIM_ARM_JOINTS,
    TASKS,
    EnvConfig,
    is_default,
)
from robot_rl.sim.contacts import ContactMonitor
from robot_rl.sim.gym_env import GymEnv
from robot_rl.sim.randomization import DomainRandomizer
from robot_rl.sim.rendering import CameraRenderer
from robot_rl.types import ObsLayout, advance_view, ee_force_feature, stack_fields

ASSETS = Path(__file__).resolve().parent / "assets"
_OSC_GROUP = 1  # actuator group of the Cartesian impedance actuators in panda.xml
FINGER_OPEN = 0.04  # per-finger slide (m): gap 8 cm when open
# Task parameters. Every size and height they are measured against (object half-extents, table top, hole width)
# is read from the model at reset, so a resized cube or a raised table keeps the checks right.
LIFT_HEIGHT = 0.05  # PickCube success: cube raised this far above its resting height
PEG_BELOW_TCP = 0.01  # peg centre sits this far below the TCP when held
INSERT_DEPTH = 0.03  # PegInsert success depth below the hole top
GRASP_SLACK = 0.006  # finger gap within the object's width +- this (and the TCP within the object) is a grasp
ARM_DOFS = slice(0, 7)


def down_quat(yaw: float) -> np.ndarray:
    """Hand pointing straight down, fingers closing along world y rotated by `yaw`."""
    return np.array([0.0, np.cos(0.5 * yaw), np.sin(0.5 * yaw), 0.0])


@dataclass(frozen=True)
class _TaskSpec:
    xml: str
    object_body: str
    object_xy: tuple[float, float]
    ee_start: tuple[float, float, float]
    workspace_lo: tuple[float, float, float]  # z: above the table top
    workspace_hi: tuple[float, float, float]


_TASKS: dict[str, _TaskSpec] = {
    "PickCube": _TaskSpec("pick_cube.xml", "cube", (0.5, 0.0), (0.5, 0.0, 0.15), (0.3, -0.25, 0.01), (0.7, 0.25, 0.3)),
    "PegInsert": _TaskSpec("peg_insert.xml", "peg", (0.55, 0.0), (0.5, 0.0, 0.2), (0.35, -0.2, 0.05), (0.7, 0.2, 0.3)),
}


class PandaEnv(gym.Env):
    """One task of the simulated Panda; see the module docstring for spaces and semantics."""

    metadata = {"render_modes": []}

    def __init__(self, cfg: EnvConfig, limits: SafetyConfig | None = None, cell: ObsLayout | None = None) -> None:
        """`limits` and `cell`: the safety limits of the robot `cfg.for_robot` names and what a run on it observes
        (`robot_rl.envs.make_env` reads both from its config)."""
        if bool(cfg.for_robot) != (limits is not None):
            raise ValueError(f"env.for_robot={cfg.for_robot!r} needs that robot's limits: build the env with make_env")
        joints = cell.state["joint_pos"] if cell is not None else (0, SIM_ARM_JOINTS)
        if joints[1] - joints[0] != SIM_ARM_JOINTS:
            raise ValueError(f"env.for_robot={cfg.for_robot}: its joints are not the sim Panda's {SIM_ARM_JOINTS}")
        if cfg.task not in _TASKS:
            raise ValueError(f"unknown task {cfg.task!r}; expected one of {TASKS}")
        if cfg.obs not in OBS_MODES:
            raise ValueError(f"unknown obs mode {cfg.obs!r}; expected one of {OBS_MODES}")
        if cfg.arm not in ARMS:
            raise ValueError(f"unknown arm {cfg.arm!r}; expected one of {ARMS}")
        if cfg.obs_frame not in OBS_FRAMES:
            raise ValueError(f"unknown obs_frame {cfg.obs_frame!r}; expected one of {OBS_FRAMES}")
        if cfg.reward not in ("sparse", "dense"):
            raise ValueError(f"unknown reward {cfg.reward!r}; expected 'sparse' or 'dense'")
        self.cfg = cfg
        self.task = cfg.task
        self._task_spec = spec = _TASKS[cfg.task]
        self.model = mujoco.MjModel.from_xml_path(str(ASSETS / spec.xml))
        m = self.model
        if cfg.arm == "osc":
            m.eq_active0[m.equality("ee_weld").id] = 0
        else:
            m.opt.disableactuator |= 1 << _OSC_GROUP
        self.data = mujoco.MjData(m)
        steps = 1.0 / (cfg.control_hz * m.opt.timestep)
        self.n_substeps = max(1, round(steps))
        self.control_dt = self.n_substeps * m.opt.timestep
        self.max_episode_steps = cfg.max_episode_steps or EPISODE_STEPS[cfg.task]

        self._tcp_id = m.site("tcp").id
        self._mocap_id = m.body_mocapid[m.body("target").id]
        self._obj_body = m.body(spec.object_body).id
        self._obj_geom = m.geom(spec.object_body).id
        self._table = m.geom("table").id
        self._obj_qadr = m.jnt_qposadr[m.body_jntadr[self._obj_body]]
        self._finger_qadr = np.array([m.jnt_qposadr[m.joint(n).id] for n in ("finger_left", "finger_right")])
        self._finger_act = np.array([m.actuator(n).id for n in ("finger_left", "finger_right")])
        self._peg = cfg.task == "PegInsert"
        self.held_grip = HELD_GRIP.get(cfg.task)
        if self._peg:
            self._peg_bottom_id = m.site("peg_bottom").id
            self._hole_top_id = m.site("hole_top").id
            self._block_mocap = m.body_mocapid[m.body("block").id]
            wall = m.geom("wall_px").id  # the hole's half-width: inner face of a wall, in the block frame
            self._hole_half = float(m.geom_pos[wall, 0] - m.geom_size[wall, 0])
        self._ws_lo = np.array(spec.workspace_lo)
        self._ws_hi = np.array(spec.workspace_hi)
        self._yaw_limit = np.pi / 2
        self._home_q = self._solve_ik(np.array(spec.ee_start), 0.0, m.qpos_spring[ARM_DOFS].copy())
        self._randomizer = DomainRandomizer(
            cfg.randomization, m, (spec.object_body,), (spec.object_body, "table"), ARM_DOFS, "table"
        )
        self._relative = cfg.obs_frame == "relative" and cfg.obs != "pixels"
        self._obj_start = np.zeros(3)  # the object's observed position at reset (obs_frame=relative)
        self._table_z = 0.0  # table top height and object half-extents of this episode, read at reset
        self._obj_half = m.geom_size[self._obj_geom].copy()

        self.action_dim = 5 if cfg.yaw else 4
        self.action_space = gym.spaces.Box(-1.0, 1.0, (self.action_dim,), np.float32)
        self._cell = cell.slices() if cell is not None and cfg.obs == "pixels" else None  # else the sim's layout
        self.crops = dict(cell.crops) if self._cell is not None else {}  # the robot's cut of its cameras
        self.state_layout = self._make_layout()
        n_state = max(s.stop for s in self.state_layout.values())
        spaces: dict[str, gym.spaces.Space] = {"state": gym.spaces.Box(-np.inf, np.inf, (n_state,), np.float32)}
        self._renderer: CameraRenderer | None = None
        if cfg.obs != "state":
            size = cfg.image_size
            for cam in cfg.cameras:
                spaces[cam] = gym.spaces.Box(0, 255, (size, size, 3), np.uint8)
            self._renderer = CameraRenderer(m, tuple(cfg.cameras), size, self._randomizer.visual.frame)
        self.observation_space = gym.spaces.Dict(spaces)

        self._target = np.zeros(3)
        self._yaw = 0.0
        self._prev_tcp = np.zeros(3)
        self._t = 0
        # Commands (TCP target, yaw, gripper) waiting out `randomization.action_latency` control steps.
        self._latency: deque[tuple[np.ndarray, float, float]] = deque()
        # The last `action_history` actions, newest first (the state's `last_actions`).
        self._past = np.zeros((cfg.randomization.action_history, self.action_dim))
        self._obs_queue: deque[dict[str, np.ndarray]] = deque()  # observations waiting out `obs_delay`
        self.contacts = ContactMonitor(m, self.n_substeps)
        # The safety layer's limits, at the control period a robot run at `control_hz` gives its safety layer.
        self._limiter = Limiter(limits, 1.0 / cfg.control_hz) if limits is not None else None

    # ----------------------------------------------------------------------------------------- gym API

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        super().reset(seed=seed)
        rng = self.np_random
        m, d, r = self.model, self.data, self.cfg.randomization
        mujoco.mj_resetData(m, d)
        self._randomizer.apply(rng)
        self._table_z = float(m.geom_pos[self._table, 2])  # a plane in the world body: its z is the top
        self._obj_half = m.geom_size[self._obj_geom].copy()
        self._ws_lo[2] = self._table_z + self._task_spec.workspace_lo[2]

        start = np.array(self._task_spec.ee_start) + rng.uniform(-r.ee_start_jitter, r.ee_start_jitter, 3)
        d.qpos[ARM_DOFS] = self._solve_ik(start, 0.0, self._home_q)
        d.mocap_pos[self._mocap_id] = start
        d.mocap_quat[self._mocap_id] = down_quat(0.0)
        offset = rng.uniform(-1.0, 1.0, 2) * np.array(r.object_xy_range)
        while np.abs(offset).max() < r.object_xy_min:  # outside an inner box (transfer suite); resample
            offset = rng.uniform(-1.0, 1.0, 2) * np.array(r.object_xy_range)
        obj_xy = np.array(self._task_spec.object_xy) + offset
        q = self._obj_qadr
        if self._peg:
            d.mocap_pos[self._block_mocap] = (obj_xy[0], obj_xy[1], self._table_z)
            d.qpos[self._finger_qadr] = self._obj_half[1]  # exactly on the peg
            d.ctrl[self._finger_act] = 0.0
            d.qpos[q : q + 3] = start - np.array([0.0, 0.0, PEG_BELOW_TCP])
            d.qpos[q + 3 : q + 7] = (1.0, 0.0, 0.0, 0.0)
        else:
            d.qpos[self._finger_qadr] = FINGER_OPEN
            d.ctrl[self._finger_act] = FINGER_OPEN
            yaw = rng.uniform(-r.object_yaw_range, r.object_yaw_range) if self.cfg.yaw else 0.0
            d.qpos[q : q + 3] = (obj_xy[0], obj_xy[1], self._table_z + self._obj_half[2])
            d.qpos[q + 3 : q + 7] = (np.cos(0.5 * yaw), 0.0, 0.0, np.sin(0.5 * yaw))
        mujoco.mj_forward(m, d)
        if self._peg:
            mujoco.mj_step(m, d, self.n_substeps)  # let the grip on the peg settle
        self._target = start.copy()
        self._yaw = 0.0
        self._prev_tcp = d.site_xpos[self._tcp_id].copy()
        self._t = 0
        grip = -1.0 if self.held_grip is None else self.held_grip  # the gripper as the episode starts
        hold = (start, down_quat(0.0), 0.5 * (1.0 - grip))  # (target, orientation, opening) at rest
        self._latency = deque(hold for _ in range(self._randomizer.latency))
        if self._limiter is not None:
            self._limiter.reset()
        self._past[:] = 0.0
        self._past[:, -1] = grip  # "hold", what the latency queue starts with
        self.contacts.reset()
        if self._relative:
            self._obj_start = self._noisy(d.xpos[self._obj_body].copy())  # where a tracker saw it
        obs = self._observe()
        self._obs_queue = deque(obs for _ in range(self._randomizer.obs_delay))
        return obs, {"success": self._success(), "safety_failure": False, **self.contacts.peaks.as_info()}

    def step(self, action: np.ndarray) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        a = np.asarray(action, dtype=np.float64)
        if a.shape != (self.action_dim,):
            raise ValueError(f"action must have shape ({self.action_dim},), got {a.shape}")
        if not np.isfinite(a).all():
            raise ValueError(f"action contains NaN or inf: {a}; refusing to step the simulator")
        a = np.clip(a, -1.0, 1.0)
        if self.held_grip is not None:
            a[-1] = self.held_grip  # the command executed, and so the one `last_actions` shows (HELD_GRIP)

        d = self.data
        tcp = d.site_xpos[self._tcp_id]
        command = self._command(tcp, a)
        if len(self._past):
            self._past[1:] = self._past[:-1].copy()
            self._past[0] = a
        if self._latency:
            # Latency delays the absolute command made from what the policy saw, as a robot controller receives
            # a late pose target (real/robot.py sends targets). Re-applying a late *delta* to the newer TCP
            # instead turns a full-gain controller into a marginally stable oscillator (x' = x + g - x_prev).
            self._latency.append(command)
            command = self._latency.popleft()
        target, quat, opening = command
        self._target = target
        d.mocap_pos[self._mocap_id] = target
        d.mocap_quat[self._mocap_id] = quat
        d.ctrl[self._finger_act] = FINGER_OPEN * opening
        self._prev_tcp[:] = tcp
        m, mon = self.model, self.contacts
        for k in range(self.n_substeps):
            mujoco.mj_step(m, d)
            mon.record(d, k)
        mon.close_step(self.n_substeps)
        self._t += 1

        unsafe = 0.0 < self.cfg.ee_force_limit < mon.step_ee_force
        success = self._success() and not unsafe
        if unsafe:
            reward = self.cfg.safety_reward
        elif success:
            reward = 1.0
        else:
            reward = self._dense_reward() if self.cfg.reward == "dense" else 0.0
            if self.cfg.ee_force_limit > 0.0:
                reward -= self.cfg.force_cost * (mon.step_ee_force / self.cfg.ee_force_limit) ** 2
        terminated = unsafe or (success and self.cfg.terminate_on_success)
        truncated = not terminated and self._t >= self.max_episode_steps
        info = {"success": success, "safety_failure": unsafe, **mon.peaks.as_info()}
        return self._delayed(self._observe()), reward, terminated, truncated, info

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None

    # -------------------------------------------------------------------------- privileged accessors

    @property
    def obs_delay(self) -> int:
        """This episode's observation delay in control steps (`randomization.obs_delay` .. `obs_delay_max`)."""
        return self._randomizer.obs_delay

    @property
    def workspace(self) -> tuple[np.ndarray, np.ndarray]:
        """(lo, hi) of the TCP targets this episode's arm takes (z from this episode's table top)."""
        return self._ws_lo.copy(), self._ws_hi.copy()

    def sim_state(self) -> dict[str, Any]:
        """Privileged state for scripted experts and the simulated human (never for policies)."""
        d = self.data
        xmat = d.site_xmat[self._tcp_id]
        s: dict[str, Any] = {
            "tcp": d.site_xpos[self._tcp_id].copy(),
            "target": self._target.copy(),
            "ee_yaw": float(np.arctan2(xmat[3], xmat[0])),
            "gripper_gap": float(d.qpos[self._finger_qadr].sum()),
            "gripper_closed_cmd": bool(d.ctrl[0] < 0.5 * FINGER_OPEN),
            "object_pos": d.xpos[self._obj_body].copy(),
            "object_yaw": self._object_yaw(),
            "grasped": self._grasped(),
            "success": self._success(),
            "object_half": self._obj_half.copy(),  # box half-extents (m)
            "table_z": self._table_z,
            "lift_z": self._lift_z(),  # PickCube: the object centre height that counts as lifted
            "max_step": self.cfg.max_step,
            "max_yaw_step": self.cfg.max_yaw_step,
            "yaw_control": self.cfg.yaw,
        }
        if self._peg:
            s["peg_bottom"] = d.site_xpos[self._peg_bottom_id].copy()
            s["hole_top"] = d.site_xpos[self._hole_top_id].copy()
        return s

    # ---------------------------------------------------------------------------------------- internals

    def _command(self, tcp: np.ndarray, a: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        """(TCP target, orientation, gripper opening) of the clipped action `a`; with `env.for_robot` cut from the
        measured TCP, orientation and opening as the robot's safety layer cuts a robot's command."""
        # Relative to the measured TCP, not the previous target: the policy sees the TCP, so the
        # dynamics stay Markov in what it observes (SERL's relative-frame actions).
        target = np.clip(tcp + a[:3] * self.cfg.max_step, self._ws_lo, self._ws_hi)
        if self.cfg.yaw:
            self._yaw = min(max(self._yaw + a[3] * self.cfg.max_yaw_step, -self._yaw_limit), self._yaw_limit)
        # Proportional, not a switch: a critic gets no gradient through a step function. Any command > 0 closes past
        # a cube up to 4 cm wide, so "> 0 grasps" holds for the nominal cube; a held grip (PegInsert) stays closed.
        quat, opening = down_quat(self._yaw), 0.5 * (1.0 - float(a[-1]))
        if self._limiter is None:
            return target, quat, opening
        measured = np.zeros(4)
        mujoco.mju_mat2Quat(measured, self.data.site_xmat[self._tcp_id])
        step, quat, _ = self._limiter.pose(tcp, measured, target, quat)
        opening = self._limiter.gripper(opening, self._opening())  # a float: the sim always measures its gripper
        return tcp + step, quat, opening

    def _opening(self) -> float:
        """The gripper's measured opening, 0 closed .. 1 open."""
        return float(self.data.qpos[self._finger_qadr].sum() / (2 * FINGER_OPEN))

    def _make_layout(self) -> dict[str, slice]:
        if self._cell is not None:
            parts = [(k, s.stop - s.start) for k, s in self._cell.items()]
            history = self.cfg.randomization.action_history * self.action_dim
            return stack_fields(parts + ([("last_actions", history)] if history else []))
        origin = "tcp_minus_hole_top" if self._peg else "tcp_minus_cube_start"
        parts: list[tuple[str, int]] = [(origin if self._relative else "tcp_pos", 3)]
        if self.cfg.yaw:
            parts.append(("ee_yaw_sin_cos", 2))
        parts += [("gripper_opening", 1), ("tcp_vel", 3)]
        if self.cfg.randomization.observe_force:
            parts.append(("ee_force", 3))
        if self.cfg.randomization.action_history:
            parts.append(("last_actions", self.cfg.randomization.action_history * self.action_dim))
        if self.cfg.obs != "pixels":
            if self._peg:
                parts += [] if self._relative else [("peg_bottom", 3), ("hole_top", 3)]
                parts.append(("hole_minus_peg_bottom", 3))
            else:
                parts += [("cube_minus_start" if self._relative else "cube_pos", 3), ("cube_minus_tcp", 3)]
                if self.cfg.yaw:
                    parts.append(("cube_yaw4_sin_cos", 2))
        return stack_fields(parts)

    def _delayed(self, obs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The observation `obs_delay` steps old, with this step's `last_actions` (the policy's own, never late)."""
        if not self._obs_queue:
            return obs
        self._obs_queue.append(obs)
        old = self._obs_queue.popleft()
        if "last_actions" in self.state_layout:
            sl = self.state_layout["last_actions"]
            old = {**old, "state": old["state"].copy()}
            old["state"][sl] = obs["state"][sl]
            gain = self.cfg.randomization.delay_compensation
            view = advance_view(old["state"], self.state_layout, self._past, self.obs_delay, gain, self.cfg.max_step)
            old["state"] = view.astype(np.float32, copy=False)
        return old

    def _noisy(self, pos: np.ndarray) -> np.ndarray:
        sigma = self.cfg.randomization.obs_noise
        return pos + self.np_random.normal(0.0, sigma, 3) if sigma > 0.0 else pos

    def _observe(self) -> dict[str, np.ndarray]:
        d = self.data
        tcp = d.site_xpos[self._tcp_id]
        xmat = d.site_xmat[self._tcp_id]
        parts = {
            "tcp_pos": tcp,
            "ee_yaw_sin_cos": np.array([xmat[3], xmat[0]]),
            "gripper_opening": np.array([self._opening()]),
            "tcp_vel": (tcp - self._prev_tcp) / self.control_dt,
            "last_actions": self._past.ravel(),
            "ee_force": ee_force_feature(self.contacts.ee_force),
            "joint_pos": d.qpos[ARM_DOFS],
            "joint_vel": d.qvel[ARM_DOFS],
        }
        if self.cfg.obs != "pixels":
            if self._peg:
                pb, ht = self._noisy(d.site_xpos[self._peg_bottom_id]), self._noisy(d.site_xpos[self._hole_top_id])
                parts |= {"peg_bottom": pb, "hole_top": ht, "hole_minus_peg_bottom": ht - pb,
                          "tcp_minus_hole_top": tcp - ht}  # fmt: skip
            else:
                cube, y4 = self._noisy(d.xpos[self._obj_body]), 4.0 * self._object_yaw()
                start = self._obj_start
                parts |= {"cube_pos": cube, "cube_minus_tcp": cube - tcp, "cube_minus_start": cube - start,
                          "tcp_minus_cube_start": tcp - start,
                          "cube_yaw4_sin_cos": np.array([np.sin(y4), np.cos(y4)])}  # fmt: skip
        obs = {"state": np.concatenate([parts[name] for name in self.state_layout]).astype(np.float32)}
        if self._renderer is not None:
            obs.update(self._renderer.render(d))
        return obs

    def _object_yaw(self) -> float:
        w, x, y, z = self.data.xquat[self._obj_body]
        return float(np.arctan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z)))

    def _grasped(self) -> bool:
        """Geometric grasp test against the object's actual extents: cheaper than scanning contacts and good
        enough for rewards and experts."""
        d, h = self.data, self._obj_half
        rel = d.xpos[self._obj_body] - d.site_xpos[self._tcp_id]
        gap = d.qpos[self._finger_qadr].sum()
        width = 2.0 * min(h[0], h[1])  # the fingers close across a face (yaw control aligns them)
        if self._peg:  # held somewhere along its length, fingers on it
            near = abs(rel[0]) < h[0] + 0.005 and abs(rel[1]) < h[1] + 0.005
            return bool(near and -(h[2] - 0.005) < rel[2] < 2 * h[0] and gap < width + 0.01)
        return bool(
            d.ctrl[0] < 0.5 * FINGER_OPEN
            and width - GRASP_SLACK < gap < width + GRASP_SLACK
            and abs(rel[0]) < h[0]
            and abs(rel[1]) < h[1]
            and abs(rel[2]) < h[2] + 0.01
        )

    def _lift_z(self) -> float:
        return self._table_z + self._obj_half[2] + LIFT_HEIGHT

    def _success(self) -> bool:
        d = self.data
        if self._peg:
            pb, ht = d.site_xpos[self._peg_bottom_id], d.site_xpos[self._hole_top_id]
            lateral = max(abs(pb[0] - ht[0]), abs(pb[1] - ht[1]))
            return bool(ht[2] - pb[2] >= INSERT_DEPTH and lateral < self._hole_half)
        return bool(d.xpos[self._obj_body, 2] >= self._lift_z() and self._grasped())

    def _dense_reward(self) -> float:
        d = self.data
        if self._peg:
            pb, ht = d.site_xpos[self._peg_bottom_id], d.site_xpos[self._hole_top_id]
            reach = 1.0 - np.tanh(10.0 * np.linalg.norm(ht - pb))
            lateral = max(abs(pb[0] - ht[0]), abs(pb[1] - ht[1]))
            depth = np.clip((ht[2] - pb[2]) / INSERT_DEPTH, 0.0, 1.0) if lateral < self._hole_half else 0.0
            return float(0.5 * (reach + depth))
        cube = d.xpos[self._obj_body]
        reach = 1.0 - np.tanh(10.0 * np.linalg.norm(cube - d.site_xpos[self._tcp_id]))
        grasped = float(self._grasped())
        lift = grasped * np.clip((cube[2] - self._table_z - self._obj_half[2]) / LIFT_HEIGHT, 0.0, 1.0)
        return float((reach + grasped + lift) / 3.0)

    def _solve_ik(self, pos: np.ndarray, yaw: float, q0: np.ndarray) -> np.ndarray:
        """Damped least-squares IK for the TCP; used at reset so episodes start at rest on the target."""
        m, d = self.model, self.data
        d.qpos[ARM_DOFS] = q0
        quat_des = down_quat(yaw)
        jacp, jacr = np.zeros((3, m.nv)), np.zeros((3, m.nv))
        quat, neg, err_q, err_w = np.zeros(4), np.zeros(4), np.zeros(4), np.zeros(3)
        for _ in range(50):
            mujoco.mj_kinematics(m, d)
            mujoco.mj_comPos(m, d)
            mujoco.mju_mat2Quat(quat, d.site_xmat[self._tcp_id])
            mujoco.mju_negQuat(neg, quat)
            mujoco.mju_mulQuat(err_q, quat_des, neg)
            mujoco.mju_quat2Vel(err_w, err_q, 1.0)
            err = np.concatenate([pos - d.site_xpos[self._tcp_id], err_w])
            if np.linalg.norm(err) < 1e-6:
                break
            mujoco.mj_jacSite(m, d, jacp, jacr, self._tcp_id)
            jac = np.concatenate([jacp, jacr])[:, ARM_DOFS]
            d.qpos[ARM_DOFS] += jac.T @ np.linalg.solve(jac @ jac.T + 1e-4 * np.eye(6), err)
        return d.qpos[ARM_DOFS].copy()


def make_sim_env(
    cfg: EnvConfig, seed: int | None = None, limits: SafetyConfig | None = None, cell: ObsLayout | None = None
) -> gym.Env:
    """The simulator env of `cfg` (built through `robot_rl.envs.make_env`, the one entry point), within `limits` and
    observing `cell` (those of the robot `cfg.for_robot` names); with a seed, its first reset and its action space
    are seeded."""
    from robot_rl.sim.maniskill import is_maniskill_task, make_maniskill_env  # numpy-only until it builds one

    sim = cfg.sim if cfg.sim != "auto" else ("maniskill" if is_maniskill_task(cfg.task) else "mujoco")
    if sim not in ("mujoco", "maniskill", "gym"):
        raise ValueError(f"unknown sim {cfg.sim!r}; expected mujoco, maniskill, gym or auto")
    if cfg.for_robot and sim != "mujoco":
        raise ValueError(f"env.for_robot runs the MuJoCo tasks; sim={sim} envs keep their own controllers")
    if sim == "gym":
        if not is_default(cfg.randomization):
            raise ValueError("env.randomization applies to the MuJoCo tasks; leave it at its default with sim=gym")
        env: gym.Env = GymEnv(cfg.task, cfg.gym, cfg.obs, cfg.image_size, cfg.max_episode_steps)
        if seed is not None:
            env.reset(seed=seed)
            env.action_space.seed(seed)
        return env
    if sim == "mujoco" and is_maniskill_task(cfg.task):
        raise ValueError(f"task {cfg.task!r} is a ManiSkill task: add sim=maniskill (sim=mujoco runs {TASKS})")
    if sim == "maniskill" and not is_maniskill_task(cfg.task):
        raise ValueError(f"sim=maniskill runs ManiSkill tasks (task=PickCube-v1, ...), not {cfg.task!r}")
    if sim == "maniskill" and not is_default(cfg.randomization):
        raise ValueError(
            "env.randomization applies to the MuJoCo tasks; ManiSkill tasks randomise their own scenes, so leave it "
            "at its default (randomization=none)"
        )
    env = make_maniskill_env(cfg) if sim == "maniskill" else PandaEnv(cfg, limits, cell)
    if seed is not None:
        env.reset(seed=seed)
        env.action_space.seed(seed)
    return env
