"""A sim run inside a robot's limits (`env.for_robot=franka`): every command it makes is one the franka safety layer
passes uncut, from the state the arm would report; without the limits the same actions are cut; the scripted expert
still solves the task and a training run takes the key."""

from __future__ import annotations

import collections
import json
from pathlib import Path

import mujoco
import numpy as np
import pytest

from robot_rl.envs import make_env
from robot_rl.limits import Limiter
from robot_rl.real.config import load_robot_config
from robot_rl.real.safety import RobotState, SafetyFilter
from robot_rl.sim import EnvConfig, ScriptedExpert
from robot_rl.sim.envs import ARM_DOFS, FINGER_OPEN

FRANKA = load_robot_config("franka")
DT = 0.1  # the env's control period (control_hz 10), the safety layer's `dt` on a robot run at that rate


def _measured(env, now: float) -> RobotState:
    """What franka's driver would report before the step: TCP pose, gripper opening, arm joints."""
    d = env.unwrapped.data
    quat = np.zeros(4)
    mujoco.mju_mat2Quat(quat, d.site("tcp").xmat)
    opening = float(d.joint("finger_left").qpos[0] + d.joint("finger_right").qpos[0]) / (2 * FINGER_OPEN)
    return RobotState(d.site("tcp").xpos.copy(), quat, opening, d.qpos[ARM_DOFS].copy(), now)


def _commanded(env) -> tuple[np.ndarray, np.ndarray, float]:
    """What the step sent to the arm: the target pose (the mocap body) and the gripper opening."""
    d, m = env.unwrapped.data, env.unwrapped.model
    mocap = m.body("target").mocapid[0]
    return d.mocap_pos[mocap].copy(), d.mocap_quat[mocap].copy(), float(d.actuator("finger_left").ctrl[0] / FINGER_OPEN)


def _actions(kind: str, env, expert: ScriptedExpert, rng: np.random.Generator, t: int) -> np.ndarray:
    if kind == "expert":
        return expert.act(env)
    if kind == "extreme":  # full diagonals, the gripper flipping at random
        return rng.choice([-1.0, 1.0], 4)
    # into a corner of the workspace, then reversing every step with the gripper flipping each time
    return np.array([1.0, 1.0, -1.0, 1.0]) if t < 15 else np.array([(-1.0) ** t, 1.0, 1.0, (-1.0) ** t])


def _cuts(limits: str) -> collections.Counter:
    """Every step of an expert, an extreme and a wall-and-reversal episode, each command fed to franka's safety
    layer (reset per episode, as `RobotEnv.reset` does); counts what it cut."""
    env, cuts = make_env(EnvConfig(for_robot=limits), seed=0), collections.Counter()
    for ep, kind in enumerate(("expert", "extreme", "walls")):
        env.reset(seed=ep)
        safety = SafetyFilter(FRANKA.safety, DT)
        expert, rng = ScriptedExpert(noise_std=0.1, seed=ep), np.random.default_rng(ep)
        for t in range(50):
            state = _measured(env, t * DT)
            _, _, terminated, truncated, _ = env.step(_actions(kind, env, expert, rng, t))
            pos, quat, opening = _commanded(env)
            cmd = safety.filter(pos, quat, opening, state, t * DT)
            cuts.update(r.split(":")[0] for r in cmd.reasons)
            cuts["steps"] += 1
            cuts["gripper"] += cmd.gripper is None or abs(cmd.gripper - opening) > 1e-9
            cuts["moved"] += cmd.target_pos is None or np.abs(cmd.target_pos - pos).max() > 1e-9
            if terminated or truncated:
                break
    return cuts


def test_franka_limits_in_the_sim_leave_the_safety_layer_nothing_to_cut() -> None:
    cuts = _cuts("franka")
    assert cuts.pop("steps") > 100
    assert +cuts == collections.Counter()  # nothing cut, held or moved, gripper included


def test_the_same_actions_without_limits_are_cut() -> None:
    """The check above can fail: the unlimited sim's 4.3 cm diagonals and one-step gripper flips are cut."""
    cuts = _cuts("")
    assert cuts["step_limit"] and cuts["acceleration"] and cuts["workspace"] and cuts["gripper"] and cuts["moved"]


def test_the_expert_solves_pick_cube_inside_franka_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = collections.Counter()
    pose = Limiter.pose
    monkeypatch.setattr(Limiter, "pose", lambda self, *a: calls.update(["pose"]) or pose(self, *a))
    env, expert = make_env(EnvConfig(for_robot="franka")), ScriptedExpert()
    wins = 0
    for seed in range(20):
        env.reset(seed=seed)
        while True:
            _, _, terminated, truncated, info = env.step(expert.act(env))
            if terminated or truncated:
                break
        wins += info["success"]
    assert wins >= 19 and calls["pose"] > 100


def test_a_training_run_with_limits_collects_trains_and_evaluates_inside_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from robot_rl.checkpoint import Checkpoint
    from robot_rl.config import load_config
    from robot_rl.loop.trainer import train

    calls = collections.Counter()
    pose = Limiter.pose
    monkeypatch.setattr(Limiter, "pose", lambda self, *a: calls.update(["pose"]) or pose(self, *a))
    summary = train(load_config([f"run_dir={tmp_path}", "env.for_robot=franka", "loop.env_steps=40",
                                 "loop.eval_every=0", "loop.final_eval_episodes=1", "demos.n_episodes=1",
                                 "profile=cpu"]))  # fmt: skip
    assert json.loads(summary.read_text())["status"] == "finished"
    assert calls["pose"] > 40 + 10  # the online steps, the demo's and the evaluation's
    assert Checkpoint(tmp_path).cfg.env.for_robot == "franka"  # evals and deploy rebuild it


def test_limits_need_the_entry_point_that_loads_them() -> None:
    from robot_rl.sim.envs import PandaEnv

    with pytest.raises(ValueError, match="build the env with make_env"):
        PandaEnv(EnvConfig(for_robot="franka"))
    with pytest.raises(ValueError, match="env.for_robot runs the MuJoCo tasks"):
        make_env(EnvConfig(task="PickCube-v1", for_robot="franka"))
