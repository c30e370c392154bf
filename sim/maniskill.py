"""ManiSkill 3 tasks behind PandaEnv's interface: same obs dict, action convention, `info["success"]`, episode ends.

Supported (offline: none of them downloads assets): PickCube-v1 (pick the cube and hold it still at a goal point
in the air), PushCube-v1 (push the cube into a target disc), PegInsertionSide-v1 (grasp a peg lying on the table
and insert it sideways into a box; no scripted expert, so demos must come from `demos.path`).

Actions, as in `sim/envs.py`: [-1, 1]^A, A = 4 (dx, dy, dz, gripper) or 5 with `yaw` (dyaw before the gripper);
the xyz delta is `max_step` metres per step relative to the measured TCP (ManiSkill's `pd_ee_delta_pos`, which
moves relative to the current end-effector pose; `pd_ee_delta_pose` with roll = pitch = 0 when `yaw`); the gripper
is proportional, +1 closed, -1 open.

`obs["state"]` (float32): tcp_pos (3), [ee_yaw_sin_cos (2)], gripper_opening (1, 0 closed .. 1 open), tcp_vel (3),
then in `state`/`both` modes the task's privileged state (`state_layout` names the slices):
  PickCube-v1 / PushCube-v1: cube_pos (3), cube_minus_tcp (3), goal_pos (3), goal_minus_cube (3)
                             [, cube_yaw4_sin_cos (2) if yaw]
  PegInsertionSide-v1:       peg_pos (3), peg_minus_tcp (3), peg_quat (4), peg_head (3), hole_pos (3),
                             hole_minus_peg_head (3), hole_quat (4)
In `pixels` mode PickCube-v1 keeps goal_pos (3) after the proprio: its goal marker is hidden from cameras.
Cameras: "front" is ManiSkill's `base_camera`, "wrist" the Panda's `hand_camera` (robot `panda_wristcam`).

Two views: `ManiSkillVecEnv` steps N envs as one batch (GPU physics with ManiSkill's `num_envs` when CUDA is
there; on CPU ManiSkill 3.0 allows one env per PhysX scene, so N CPU scenes are stepped in turn), and
`ManiSkillEnv`, the single-env gym.Env that `make_env` returns for the learner, actors, demos and replay.
`make_vec_env` returns the batch for a multi-env run's actor (`loop.num_envs`).

Everything above the `# --- SAPIEN` line is plain numpy so CI tests the mapping without Vulkan.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

if TYPE_CHECKING:
    from robot_rl.sim.config import EnvConfig

CAMERAS = {"front": "base_camera", "wrist": "hand_camera"}  # our name -> ManiSkill sensor uid
ROBOT = "panda_wristcam"  # the Panda plus a hand camera; same arm and gripper in every task, so demos replay alike
EE_DELTA_LIMIT = 0.1  # pd_ee_delta_pos maps a normalised action of 1 to 0.1 m
ROT_DELTA_LIMIT = 0.1  # pd_ee_delta_pose: 0.1 rad per step at 1; larger yaw steps saturate here
FINGER_OPEN = 0.04  # per-finger joint position (m) when open
CUBE_HALF = 0.02
GRIP_CLOSE, GRIP_OPEN = 1.0, -1.0
OBS_MODES = ("state", "pixels", "both")


@dataclass(frozen=True)
class TaskSpec:
    episode_steps: int  # ManiSkill's registered limit, kept at our 10 Hz control
    kind: str  # cube | peg: which privileged state and expert
    workspace_lo: tuple[float, float, float]
    workspace_hi: tuple[float, float, float]
    has_expert: bool


TASKS: dict[str, TaskSpec] = {
    "PickCube-v1": TaskSpec(50, "cube", (-0.3, -0.3, 0.005), (0.3, 0.3, 0.45), True),
    "PushCube-v1": TaskSpec(50, "cube", (-0.3, -0.3, 0.005), (0.3, 0.3, 0.45), True),
    "PegInsertionSide-v1": TaskSpec(100, "peg", (-0.35, -0.45, 0.005), (0.35, 0.5, 0.45), False),
}


def is_maniskill_task(name: str) -> bool:
    """ManiSkill ids carry a version suffix ("PickCube-v1"); ours do not ("PickCube")."""
    return re.fullmatch(r"[A-Za-z0-9_]+-v\d+", name) is not None


def check_task(name: str) -> TaskSpec:
    """The task's spec, or a ValueError that says why it cannot run here (unknown, or needs downloaded assets)."""
    if name in TASKS:
        return TASKS[name]
    why = "it has no adapter here"
    assets = _asset_ids(name)
    if assets:
        why = f"it needs downloaded assets {assets}, and this setup is offline-only (PyPI/Debian, no asset downloads)"
    raise ValueError(f"ManiSkill task {name!r} is not supported: {why}. Supported: {', '.join(TASKS)}")


def _asset_ids(name: str) -> list[str]:
    try:
        import mani_skill.envs  # noqa: F401
        from mani_skill.utils.registration import REGISTERED_ENVS
    except Exception:  # no ManiSkill: nothing more to say
        return []
    spec = REGISTERED_ENVS.get(name)
    return list(spec.asset_download_ids or []) if spec is not None else []


def state_parts(task: str, yaw: bool, obs: str) -> list[tuple[str, int]]:
    parts: list[tuple[str, int]] = [("tcp_pos", 3)]
    if yaw:
        parts.append(("ee_yaw_sin_cos", 2))
    parts += [("gripper_opening", 1), ("tcp_vel", 3)]
    if obs == "pixels":
        # PickCube-v1's goal marker is hidden from cameras (as in ManiSkill): the goal is part of the command.
        return parts + [("goal_pos", 3)] if task == "PickCube-v1" else parts
    if TASKS[task].kind == "peg":
        parts += [("peg_pos", 3), ("peg_minus_tcp", 3), ("peg_quat", 4), ("peg_head", 3), ("hole_pos", 3),
                  ("hole_minus_peg_head", 3), ("hole_quat", 4)]  # fmt: skip
    else:
        parts += [("cube_pos", 3), ("cube_minus_tcp", 3), ("goal_pos", 3), ("goal_minus_cube", 3)]
        if yaw:
            parts.append(("cube_yaw4_sin_cos", 2))
    return parts


def state_layout(task: str, yaw: bool, obs: str) -> dict[str, slice]:
    layout, i = {}, 0
    for name, n in state_parts(task, yaw, obs):
        layout[name] = slice(i, i + n)
        i += n
    return layout


def quat_yaw(q: np.ndarray) -> np.ndarray:
    """Yaw (rad) of the body x axis in the world xy plane, for (..., 4) wxyz quaternions."""
    w, x, y, z = np.moveaxis(np.asarray(q, np.float64), -1, 0)
    return np.arctan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))


def build_state(
    task: str, raw: dict[str, np.ndarray], prev_tcp: np.ndarray, dt: float, yaw: bool, obs: str
) -> np.ndarray:
    """(B, D) float32 state from a batch of raw scene quantities (see `ManiSkillVecEnv._raw` for the keys)."""
    tcp = raw["tcp_pos"]
    cols = [tcp]
    if yaw:
        y = quat_yaw(raw["tcp_quat"])
        cols.append(np.stack([np.sin(y), np.cos(y)], -1))
    cols.append(raw["finger_qpos"].sum(-1, keepdims=True) / (2 * FINGER_OPEN))
    cols.append((tcp - prev_tcp) / dt)
    if obs == "pixels" and task == "PickCube-v1":
        cols.append(raw["goal_pos"])
    if obs != "pixels":
        obj = raw["obj_pos"]
        if TASKS[task].kind == "peg":
            head, hole = raw["peg_head"], raw["goal_pos"]
            cols += [obj, obj - tcp, raw["obj_quat"], head, hole, hole - head, raw["goal_quat"]]
        else:
            cols += [obj, obj - tcp, raw["goal_pos"], raw["goal_pos"] - obj]
            if yaw:
                y4 = 4.0 * quat_yaw(raw["obj_quat"])
                cols.append(np.stack([np.sin(y4), np.cos(y4)], -1))
    return np.concatenate(cols, -1).astype(np.float32)


def to_maniskill_action(
    action: np.ndarray,
    tcp: np.ndarray,
    *,
    yaw: bool,
    max_step: float,
    max_yaw_step: float,
    workspace: tuple[Sequence[float], Sequence[float]],
) -> np.ndarray:
    """(B, A) actions in our convention -> (B, 4) pd_ee_delta_pos or (B, 7) pd_ee_delta_pose normalised actions.

    The xyz target (measured TCP + delta) is clipped to the workspace box first, as PandaEnv clips its mocap target.
    """
    a = np.asarray(action, np.float64)
    n = 5 if yaw else 4
    if a.ndim != 2 or a.shape[1] != n:
        raise ValueError(f"actions must have shape (B, {n}), got {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError(f"action contains NaN or inf: {a}; refusing to step the simulator")
    a = np.clip(a, -1.0, 1.0)
    target = np.clip(tcp + a[:, :3] * max_step, workspace[0], workspace[1])
    move = (target - tcp) / EE_DELTA_LIMIT
    # ManiSkill's gripper is pd_joint_pos over [-0.01, 0.04] per finger with -1 closed: our sign flipped.
    grip = -a[:, -1:]
    if not yaw:
        return np.concatenate([move, grip], 1).astype(np.float32)
    # Rotation is about the hand's own z axis, which points down: +yaw in the world is -z in the hand frame.
    rot = np.zeros((len(a), 3))
    rot[:, 2] = -a[:, 3] * max_yaw_step / ROT_DELTA_LIMIT
    return np.concatenate([move, np.clip(rot, -1.0, 1.0), grip], 1).astype(np.float32)


def episode_ends(
    success: np.ndarray, t: np.ndarray, max_steps: int, terminate_on_success: bool
) -> tuple[np.ndarray, np.ndarray]:
    """(terminated, truncated) per env, PandaEnv's rule: success ends an episode; the step limit truncates it."""
    terminated = np.asarray(success, bool) & terminate_on_success
    truncated = ~terminated & (np.asarray(t) >= max_steps)
    return terminated, truncated


# ------------------------------------------------------------------------------------ scripted experts
# Pure functions of `sim_state()`: (TCP goal position, gripper command); ScriptedExpert turns them into actions.


def pick_place_goal(s: dict[str, Any]) -> tuple[np.ndarray, float]:
    """PickCube-v1: grasp the cube, carry it to the goal point and hold still there (success needs a static arm)."""
    tcp, cube, goal = s["tcp"], s["object_pos"], s["goal_pos"]
    dxy = float(np.linalg.norm(cube[:2] - tcp[:2]))
    height = tcp[2] - cube[2]
    if s["grasped"]:
        return tcp + (goal - cube), GRIP_CLOSE
    if s["gripper_closed_cmd"] and s["gripper_gap"] < 2 * CUBE_HALF - 0.01:
        return np.array([tcp[0], tcp[1], cube[2] + 0.05]), GRIP_OPEN  # closed on nothing: open, back off
    if dxy < 0.008 and height < 0.006:
        return cube.copy(), GRIP_CLOSE
    if height < 0.03 and dxy > 0.02:
        return np.array([tcp[0], tcp[1], cube[2] + 0.05]), GRIP_OPEN  # low and beside it: rise first
    if s["gripper_gap"] < 0.07 and height < 0.05:
        return np.array([cube[0], cube[1], max(tcp[2], cube[2] + 0.04)]), GRIP_OPEN
    clearance = float(np.clip(2.0 * (dxy - 0.005), 0.0, 0.05))
    return np.array([cube[0], cube[1], cube[2] + clearance]), GRIP_OPEN


def push_goal(s: dict[str, Any]) -> tuple[np.ndarray, float]:
    """PushCube-v1: closed fingers behind the cube, on the line to the target, then push along it."""
    tcp, cube, goal = s["tcp"], s["object_pos"], s["goal_pos"]
    d = goal[:2] - cube[:2]
    u = d / max(float(np.linalg.norm(d)), 1e-6)
    behind = cube[:2] - u * (CUBE_HALF + 0.015)
    rel = tcp[:2] - cube[:2]
    along, across = float(rel @ u), float(abs(rel[0] * u[1] - rel[1] * u[0]))
    push_z = CUBE_HALF
    if along < -CUBE_HALF and across < 0.012 and tcp[2] < push_z + 0.015:
        end = goal[:2] - u * (CUBE_HALF + 0.005)
        return np.array([end[0], end[1], push_z]), GRIP_CLOSE
    if np.linalg.norm(tcp[:2] - behind) < 0.01:
        return np.array([behind[0], behind[1], push_z]), GRIP_CLOSE
    if tcp[2] < 0.06 and np.linalg.norm(tcp[:2] - behind) > 0.02:
        return np.array([tcp[0], tcp[1], 0.08]), GRIP_CLOSE  # rise over the cube before moving around it
    return np.array([behind[0], behind[1], max(tcp[2], 0.08) if along > -CUBE_HALF else push_z]), GRIP_CLOSE


def maniskill_goal_distance(task: str, s: dict[str, Any]) -> float:
    """Task potential for the simulated human (lower is closer; jumps up when the object is dropped)."""
    obj, goal, tcp = s["object_pos"], s["goal_pos"], s["tcp"]
    if task == "PushCube-v1":
        return float(np.linalg.norm(goal[:2] - obj[:2]) + 0.5 * np.linalg.norm(obj - tcp))
    if task == "PegInsertionSide-v1":
        reach = 0.0 if s["grasped"] else float(np.linalg.norm(obj - tcp)) + 0.1
        return float(np.linalg.norm(goal - s["peg_head"])) + reach
    if s["grasped"]:
        return float(np.linalg.norm(goal - obj))
    return float(np.linalg.norm(obj - tcp) + np.linalg.norm(goal - obj) + 0.05)


EXPERTS = {"PickCube-v1": pick_place_goal, "PushCube-v1": push_goal}


# --- SAPIEN: everything below needs `mani_skill` (and a Vulkan device for cameras) ---------------------------


@functools.cache
def maniskill_available() -> tuple[bool, str]:
    """(importable, reason if not): ManiSkill 3 and SAPIEN import (building a scene also needs Vulkan)."""
    try:
        import mani_skill.envs  # noqa: F401
    except Exception as e:  # ImportError, or SAPIEN failing to load its native libraries
        return False, f"mani_skill does not import ({type(e).__name__}: {e}); ./dev installs it (see README)"
    return True, ""


@functools.cache
def vulkan_available() -> tuple[bool, str]:
    """(usable, reason if not): SAPIEN finds a Vulkan device; it needs one even without cameras (URDF materials)."""
    ok, why = maniskill_available()
    if not ok:
        return ok, why
    try:
        import sapien

        sapien.render.RenderSystem()
    except Exception as e:
        return False, (
            f"SAPIEN found no usable Vulkan device ({type(e).__name__}: {e}); on Debian 12 install libvulkan1 and "
            "mesa-vulkan-drivers from bookworm-backports (Mesa 22.3 lacks an extension SAPIEN needs)"
        )
    return True, ""


def _quiet_maniskill() -> None:
    from mani_skill.utils.logging_utils import logger

    logger.setLevel(logging.ERROR)  # the robot-list warning on every make: panda_wristcam is the Panda plus a camera


def _np(x: Any) -> np.ndarray:
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


class ManiSkillVecEnv:
    """N ManiSkill envs of one task as one batch: (N, A) actions in, (N, ...) obs/reward/flags out; no auto-reset.

    `backend`: "cpu" (N single-scene CPU envs stepped in turn), "gpu" (one ManiSkill env with num_envs=N on
    PhysX GPU), or "auto" (gpu when CUDA is there and N > 1).
    """

    def __init__(
        self,
        task: str,
        num_envs: int = 1,
        *,
        obs: str = "state",
        cameras: Sequence[str] = ("front", "wrist"),
        image_size: int = 64,
        control_hz: float = 10.0,
        reward: str = "sparse",
        yaw: bool = False,
        terminate_on_success: bool = True,
        max_step: float = 0.025,
        max_yaw_step: float = 0.25,
        max_episode_steps: int = 0,
        backend: str = "auto",
    ) -> None:
        self.spec = check_task(task)
        if obs not in OBS_MODES:
            raise ValueError(f"unknown obs mode {obs!r}; expected one of {OBS_MODES}")
        if reward not in ("sparse", "dense"):
            raise ValueError(f"unknown reward {reward!r}; expected 'sparse' or 'dense'")
        bad = [c for c in cameras if c not in CAMERAS]
        if obs != "state" and bad:
            raise ValueError(f"ManiSkill tasks have cameras {sorted(CAMERAS)}; got {bad}")
        if float(control_hz) != int(control_hz) or 100 % int(control_hz):
            raise ValueError(f"control_hz={control_hz}: ManiSkill needs a divisor of its 100 Hz physics")
        import torch

        if backend == "auto":
            backend = "gpu" if torch.cuda.is_available() and num_envs > 1 else "cpu"
        if backend not in ("cpu", "gpu"):
            raise ValueError(f"unknown backend {backend!r}; expected auto, cpu or gpu")
        import mani_skill.envs  # noqa: F401  (registers the tasks)

        _quiet_maniskill()
        self.task, self.num_envs, self.backend = task, num_envs, backend
        self.obs_mode, self.yaw, self.reward_mode = obs, yaw, reward
        self.cameras = tuple(cameras) if obs != "state" else ()
        self.image_size = image_size
        self.terminate_on_success = terminate_on_success
        self.max_step, self.max_yaw_step = max_step, max_yaw_step
        self.max_episode_steps = max_episode_steps or self.spec.episode_steps
        self.control_dt = 1.0 / control_hz
        self._workspace = (np.array(self.spec.workspace_lo), np.array(self.spec.workspace_hi))
        kwargs = dict(
            obs_mode="none",  # we read the scene ourselves and render only the cameras asked for
            control_mode="pd_ee_delta_pose" if yaw else "pd_ee_delta_pos",
            reward_mode="normalized_dense" if reward == "dense" else "none",
            robot_uids=ROBOT,
            sim_config={"sim_freq": 100, "control_freq": int(control_hz)},
            sensor_configs={"width": image_size, "height": image_size},
            render_mode=None,
            # No render system for state (cheaper start-up); SAPIEN still needs a Vulkan device to load the robot.
            render_backend=("gpu" if torch.cuda.is_available() else "cpu") if self.cameras else "none",
        )
        if backend == "gpu":
            self._envs = [gym.make(task, num_envs=num_envs, sim_backend="physx_cuda", **kwargs).unwrapped]
        else:
            self._envs = [gym.make(task, num_envs=1, sim_backend="physx_cpu", **kwargs).unwrapped
                          for _ in range(num_envs)]  # fmt: skip
        self.action_dim = 5 if yaw else 4
        self.state_layout = state_layout(task, yaw, obs)
        self.state_dim = max(s.stop for s in self.state_layout.values())
        self._t = np.zeros(num_envs, np.int64)
        self._prev_tcp = np.zeros((num_envs, 3))
        self._grip_cmd = np.full(num_envs, GRIP_OPEN)
        self._rng = np.random.default_rng()

    # ------------------------------------------------------------------------------------------- batch API

    def reset(
        self, seed: int | Sequence[int] | None = None, env_idx: Sequence[int] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Resets all envs (or `env_idx`); an int seed seeds env i with seed + i. Returns the full batch."""
        idx = np.arange(self.num_envs) if env_idx is None else np.asarray(env_idx, np.int64)
        if seed is None:  # ManiSkill's unseeded reset draws from torch's global RNG: keep it ours and reproducible
            seeds = self._rng.integers(0, 2**31 - 1, len(idx))
        elif isinstance(seed, int | np.integer):
            self._rng = np.random.default_rng(int(seed))
            seeds = int(seed) + np.arange(len(idx))
        else:
            seeds = np.asarray(seed, np.int64)
        if self.backend == "gpu" and env_idx is None:
            self._envs[0].reset(seed=[int(s) for s in seeds])
        elif self.backend == "gpu":
            # A seeded partial reset would seed torch from env 0's seed every time (same start states again), so
            # reset unseeded under a torch RNG seeded from our stream: reproducible, and different each time.
            import torch

            env = self._envs[0]
            with torch.random.fork_rng(devices=[env.device.index or 0] if env.device.type == "cuda" else []):
                torch.manual_seed(int(seeds[0]))
                env.reset(options={"env_idx": torch.as_tensor(idx, device=env.device)})
        else:
            for i, s in zip(idx, seeds, strict=True):
                self._envs[i].reset(seed=int(s))
        raw = self._raw()
        self._t[idx] = 0
        self._prev_tcp[idx] = raw["tcp_pos"][idx]
        self._grip_cmd[idx] = GRIP_OPEN
        return self._observe(raw), {"success": self._success()}

    def step(self, actions: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray, dict]:
        tcp = self._raw(objects=False)["tcp_pos"]
        ms = to_maniskill_action(actions, tcp, yaw=self.yaw, max_step=self.max_step, max_yaw_step=self.max_yaw_step,
                                 workspace=self._workspace)  # fmt: skip
        self._grip_cmd = np.clip(np.asarray(actions, np.float64)[:, -1], -1.0, 1.0)
        import torch

        rewards = []
        if self.backend == "gpu":
            env = self._envs[0]
            _, r, _, _, info = env.step(torch.as_tensor(ms, device=env.device))
            success = _np(info["success"]).astype(bool)
            rewards.append(_np(r))
        else:
            flags = []
            for env, a in zip(self._envs, ms, strict=True):
                _, r, _, _, info = env.step(torch.as_tensor(a[None]))
                flags.append(bool(info["success"][0]))
                rewards.append(_np(r))
            success = np.array(flags)
        self._prev_tcp = tcp
        self._t += 1
        reward = success.astype(np.float64)
        if self.reward_mode == "dense":
            reward = np.where(success, 1.0, np.concatenate(rewards).astype(np.float64))
        terminated, truncated = episode_ends(success, self._t, self.max_episode_steps, self.terminate_on_success)
        return self._observe(self._raw()), reward, terminated, truncated, {"success": success}

    def close(self) -> None:
        for env in self._envs:
            env.close()
        self._envs = []

    def sim_state(self, i: int = 0) -> dict[str, Any]:
        """Privileged state of env i for scripted experts and the simulated human (never for policies)."""
        raw = self._raw()
        env, j = (self._envs[0], i) if self.backend == "gpu" else (self._envs[i], 0)
        obj = env.peg if self.spec.kind == "peg" else (env.cube if self.task == "PickCube-v1" else env.obj)
        s: dict[str, Any] = {
            "tcp": raw["tcp_pos"][i].copy(),
            "ee_yaw": float(quat_yaw(raw["tcp_quat"][i])),
            "gripper_gap": float(raw["finger_qpos"][i].sum()),
            "gripper_closed_cmd": bool(self._grip_cmd[i] > 0.0),
            "object_pos": raw["obj_pos"][i].copy(),
            "object_yaw": float(quat_yaw(raw["obj_quat"][i])),
            "goal_pos": raw["goal_pos"][i].copy(),
            "grasped": bool(_np(env.agent.is_grasping(obj))[j]),
            "success": bool(self._success()[i]),
            "max_step": self.max_step,
            "max_yaw_step": self.max_yaw_step,
            "yaw_control": self.yaw,
        }
        if self.spec.kind == "peg":
            s["peg_head"] = raw["peg_head"][i].copy()
        s["goal_distance"] = maniskill_goal_distance(self.task, s)
        return s

    # ------------------------------------------------------------------------------------------- internals

    def _raw(self, objects: bool = True) -> dict[str, np.ndarray]:
        """Batched numpy scene quantities: tcp_pos/quat, finger_qpos, obj_pos/quat, goal_pos[/quat], peg_head."""
        per_env = [self._raw_one(env, objects) for env in self._envs]
        return {k: np.concatenate([p[k] for p in per_env]).astype(np.float64) for k in per_env[0]}

    def _raw_one(self, env: Any, objects: bool) -> dict[str, np.ndarray]:
        tcp = env.agent.tcp.pose
        out = {"tcp_pos": _np(tcp.p), "tcp_quat": _np(tcp.q), "finger_qpos": _np(env.agent.robot.get_qpos())[:, -2:]}
        if not objects:
            return out
        if self.spec.kind == "peg":
            hole = env.box_hole_pose
            out.update(obj_pos=_np(env.peg.pose.p), obj_quat=_np(env.peg.pose.q), peg_head=_np(env.peg_head_pos),
                       goal_pos=_np(hole.p), goal_quat=_np(hole.q))  # fmt: skip
        else:
            obj, goal = (env.cube, env.goal_site) if self.task == "PickCube-v1" else (env.obj, env.goal_region)
            out.update(obj_pos=_np(obj.pose.p), obj_quat=_np(obj.pose.q), goal_pos=_np(goal.pose.p))
        return out

    def _success(self) -> np.ndarray:
        return np.concatenate([_np(env.evaluate()["success"]).astype(bool) for env in self._envs])

    def _observe(self, raw: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        obs = {"state": build_state(self.task, raw, self._prev_tcp, self.control_dt, self.yaw, self.obs_mode)}
        if self.cameras:
            frames = [self._render(env) for env in self._envs]
            for cam in self.cameras:
                obs[cam] = np.concatenate([f[cam] for f in frames])
        return obs

    def _render(self, env: Any) -> dict[str, np.ndarray]:
        """RGB of our cameras only (ManiSkill's rgb obs mode renders every sensor, doubling the cost for one)."""
        for obj in env._hidden_objects:  # goal markers etc., hidden from sensors as ManiSkill's own obs does
            obj.hide_visual()
        env.scene.update_render(update_sensors=True, update_human_render_cameras=False)
        out = {}
        for cam in self.cameras:
            sensor = env.scene.sensors[CAMERAS[cam]]
            sensor.capture()
            rgb = sensor.get_obs(rgb=True, depth=False, position=False, segmentation=False)["rgb"]
            out[cam] = _np(rgb).astype(np.uint8)
        for obj in env._hidden_objects:
            obj.show_visual()
        return out


class ManiSkillEnv(gym.Env):
    """One ManiSkill task as a PandaEnv look-alike (what `make_env` returns for ManiSkill task names)."""

    metadata = {"render_modes": []}

    def __init__(self, cfg: EnvConfig, backend: str = "cpu") -> None:
        self.cfg = cfg
        self.task = cfg.task
        self._vec = vec_env(cfg, 1, backend)
        self.max_episode_steps = self._vec.max_episode_steps
        self.control_dt = self._vec.control_dt
        self.state_layout = self._vec.state_layout
        self.action_dim = self._vec.action_dim
        self.action_space = gym.spaces.Box(-1.0, 1.0, (self.action_dim,), np.float32)
        spaces: dict[str, gym.spaces.Space] = {
            "state": gym.spaces.Box(-np.inf, np.inf, (self._vec.state_dim,), np.float32)
        }
        for cam in self._vec.cameras:
            spaces[cam] = gym.spaces.Box(0, 255, (cfg.image_size, cfg.image_size, 3), np.uint8)
        self.observation_space = gym.spaces.Dict(spaces)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        super().reset(seed=seed)
        ms_seed = seed if seed is not None else int(self.np_random.integers(0, 2**31 - 1))
        obs, info = self._vec.reset(seed=ms_seed)
        return {k: v[0] for k, v in obs.items()}, {"success": bool(info["success"][0])}

    def step(self, action: np.ndarray) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        a = np.asarray(action, np.float64)
        if a.shape != (self.action_dim,):
            raise ValueError(f"action must have shape ({self.action_dim},), got {a.shape}")
        obs, r, term, trunc, info = self._vec.step(a[None])
        obs = {k: v[0] for k, v in obs.items()}
        return obs, float(r[0]), bool(term[0]), bool(trunc[0]), {"success": bool(info["success"][0])}

    def close(self) -> None:
        self._vec.close()

    def sim_state(self) -> dict[str, Any]:
        return self._vec.sim_state(0)

    def expert_goal(self, s: dict[str, Any]) -> tuple[np.ndarray, float]:
        """(TCP goal, gripper) of this task's scripted expert; ScriptedExpert turns it into an action."""
        if self.task not in EXPERTS:
            raise NotImplementedError(
                f"no scripted expert for {self.task}; give teleop demos with demos.path=<store> "
                f"(scripted: {', '.join(EXPERTS)})"
            )
        return EXPERTS[self.task](s)


def vec_env(cfg: EnvConfig, num_envs: int, backend: str = "auto") -> ManiSkillVecEnv:
    """`num_envs` envs of `cfg`'s task as one batch, in the same terms as the single env."""
    return ManiSkillVecEnv(
        cfg.task,
        num_envs,
        obs=cfg.obs,
        cameras=cfg.cameras,
        image_size=cfg.image_size,
        control_hz=cfg.control_hz,
        reward=cfg.reward,
        yaw=cfg.yaw,
        terminate_on_success=cfg.terminate_on_success,
        max_step=cfg.max_step,
        max_yaw_step=cfg.max_yaw_step,
        max_episode_steps=cfg.max_episode_steps,
        backend=backend,
    )


def _check_can_start(cfg: EnvConfig) -> None:
    check_task(cfg.task)
    ok, why = vulkan_available()
    if not ok:
        raise RuntimeError(f"sim=maniskill cannot start {cfg.task}: {why}")


def make_maniskill_env(cfg: EnvConfig) -> ManiSkillEnv:
    _check_can_start(cfg)
    return ManiSkillEnv(cfg)


def make_maniskill_vec_env(cfg: EnvConfig, num_envs: int) -> ManiSkillVecEnv:
    """The batch a multi-env run's actor steps: PhysX GPU when CUDA is there, else CPU scenes in turn."""
    _check_can_start(cfg)
    return vec_env(cfg, num_envs)
