"""`robot-rl train robot=sim` against a `robot-rl sim-robot --lockstep` process over real ROS 2: the HIL-SERL actor
and every evaluation step the arm through `RobotEnv`, the policy sees proprio (and cameras) but never the object."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from mcap.reader import make_reader
from real_util import spawn, stop, wait_until
from safetensors import safe_open

from robot_rl.checkpoint import Checkpoint, latest_checkpoint
from robot_rl.config import load_config
from robot_rl.errors import ConfigError
from robot_rl.types import PRIVILEGED_FIELDS

pytestmark = pytest.mark.slow

STEPS, EPISODE = 200, 50  # PickCube episodes are 50 steps; lockstep at 10 Hz control


def sim_robot(domain: int, *extra: str) -> subprocess.Popen:
    return spawn("sim-robot", "--lockstep", "--domain", str(domain), *extra)


def simulated_s(sim: subprocess.Popen) -> float:
    """Stops the sim robot (SIGTERM: it logs how much simulated time the commands it got advanced)."""
    sim.terminate()
    _, err = sim.communicate(timeout=30)
    found = re.search(r"stopped after \d+ ticks, ([\d.]+) s simulated", err)
    assert found, err[-2000:]
    return float(found.group(1))


def train(domain: int, *overrides: str) -> subprocess.Popen:
    return spawn("train", "robot=sim", "robot.lockstep=true", f"robot.domain_id={domain}", "intervention.enabled=false",
                 "threads=1", *overrides)  # fmt: skip


def policy_state_dim(ckpt: Path) -> int:
    with safe_open(str(ckpt / "model.safetensors"), "pt") as f:
        return f.get_slice("policy.encoder.state_mean").get_shape()[-1]


def test_train_on_the_sim_robot_checkpoints_evaluates_through_robot_env_without_object_pose(
    domain: int, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    sim = sim_robot(domain)
    try:
        tr = train(domain, f"loop.env_steps={STEPS}", "loop.eval_every=100", "loop.eval_episodes=1",
                   "loop.final_eval_episodes=2", "loop.checkpoint_every=100", f"run_dir={run}",
                   f"record={tmp_path / 'session.mcap'}")  # fmt: skip
        out, err = tr.communicate(timeout=120)
        assert tr.returncode == 0, err[-3000:]
        # The checkpoint deploys on the same arm with no sim task behind it (it observes the robot's layout).
        dep = spawn("deploy", str(run), "--robot", "sim", "--episodes", "1", "--domain", str(domain), "--quiet",
                    "--robot-set", "lockstep=true")  # fmt: skip
        dout, derr = dep.communicate(timeout=60)
        assert dep.returncode == 0, derr[-3000:]
        assert json.loads(dout)["per_episode"][0]["steps"] == EPISODE
        seconds = simulated_s(sim)
    finally:
        stop(sim)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["env_steps"] == STEPS and summary["updates"] == STEPS
    assert summary["robot"] == "sim" and summary["env"] == "RobotEnv" and summary["reward_source"] == "success topic"
    assert summary["demo_episodes"] == 0
    # The session recording holds every command the run sent: training, 3 evaluations of 50 steps, home moves.
    assert summary["recording"] == str(tmp_path / "session.mcap")
    with open(tmp_path / "session.mcap", "rb") as f:
        topics = [c.topic for _, c, _ in make_reader(f).iter_messages()]
    assert topics.count("/robot_rl/ee_target") >= STEPS + 4 * EPISODE
    assert [e["env_steps"] for e in summary["evals"]] == [100, 200, 200]
    assert all(e["mean_length"] == EPISODE for e in summary["evals"])  # a random policy never lifts the cube
    for name in ("step_00000100", "step_00000200", "final"):
        assert (run / "checkpoints" / name).is_dir()
    # What the policy observes: proprio only. No object field, and the saved policy's input is exactly that wide.
    state = summary["obs_layout"]["state"]
    assert list(state) == ["tcp_pos", "ee_yaw_sin_cos", "gripper_opening", "tcp_vel", "joint_pos", "joint_vel",
                           "ee_force"]  # fmt: skip
    assert not set(state) & set(PRIVILEGED_FIELDS) and summary["obs_layout"]["cameras"] == []
    assert policy_state_dim(run / "checkpoints" / "final") == max(stop for _, stop in state.values()) == 26
    ckpt = Checkpoint(run / "checkpoints" / "final")
    policy, cfg = ckpt.policy(), ckpt.cfg  # as deploy and eval load it: no robot, no sim needed
    assert cfg.robot.name == "sim" and policy.select_action({"state": np.zeros(26, np.float32)}).shape == (4,)
    # Every step the robot advanced was commanded: training and all evaluation episodes (1 + 1 + 2 of 50 steps)
    # went through the sim robot, i.e. through RobotEnv (a sim env would not have advanced it). No arm time went to
    # a normaliser probe: without demos it spans the robot config's limits (`real.robot.envelope_states`).
    commanded = STEPS + 4 * EPISODE + EPISODE  # and the deployed episode
    assert seconds >= commanded / 10.0 - 1e-6, seconds


def test_a_killed_robot_run_resumes_from_its_checkpoint(domain: int, tmp_path: Path) -> None:
    run = tmp_path / "run"
    sim = sim_robot(domain)
    try:
        first = train(domain, "loop.env_steps=100000", "loop.eval_every=0", "loop.checkpoint_every=50",
                      f"run_dir={run}")  # fmt: skip
        try:
            # The pointer, not the directory: a kill between the rename and the pointer move resumes one earlier.
            wait_until(lambda: env_steps(latest_checkpoint(run / "checkpoints")) >= 100 or first.poll() is not None,
                       90, "a checkpoint")  # fmt: skip
        finally:
            stop(first)  # SIGKILL: nothing gets saved on the way out
        assert not (run / "summary.json").exists()
        ckpt = latest_checkpoint(run / "checkpoints")
        resumed_at = env_steps(ckpt)
        assert resumed_at >= 100
        second = spawn("train", f"resume={run}", f"loop.env_steps={resumed_at + 50}", "loop.final_eval_episodes=1")
        out, err = second.communicate(timeout=120)
        assert second.returncode == 0, err[-3000:]
    finally:
        stop(sim)
    assert re.search(rf"resumed .* from {ckpt.name}: {resumed_at} env steps", out + err), (out + err)[-2000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["env_steps"] == resumed_at + 50 and summary["robot"] == "sim"
    assert summary["env"] == "RobotEnv"


def env_steps(ckpt: Path | None) -> int:
    return -1 if ckpt is None else json.loads((ckpt / "counters.json").read_text())["env_steps"]


def test_cameras_with_a_crop_build_and_train_on_the_sim_robot(domain: int, tmp_path: Path) -> None:
    run = tmp_path / "run"
    sim = sim_robot(domain, "--cameras", "front,wrist")
    cams = "[{name: front, topic: camera/front/image, crop: [8, 8, 48, 48]}, {name: wrist, topic: camera/wrist/image}]"
    try:
        tr = train(domain, "obs=pixels", "sac.frozen_trunk=false", f"robot.cameras={cams}", "loop.env_steps=60",
                   "loop.eval_every=0", "loop.final_eval_episodes=1", "sac.batch_size=16",
                   f"run_dir={run}")  # fmt: skip
        out, err = tr.communicate(timeout=120)
        assert tr.returncode == 0, err[-3000:]
    finally:
        stop(sim)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["obs_layout"]["cameras"] == ["front", "wrist"]
    assert not set(summary["obs_layout"]["state"]) & set(PRIVILEGED_FIELDS)


def test_demos_collected_on_the_robot_train_a_robot_run_on_their_proprio_fields(domain: int, tmp_path: Path) -> None:
    store, run = tmp_path / "demos", tmp_path / "run"
    sim = sim_robot(domain)
    try:
        col = spawn("collect", str(store), "--robot", "sim", "--domain", str(domain),
                    "--robot-set", "lockstep=true", "-n", "1", "--teleop", "simulated", "--max-steps", "20",
                    "--obs", "state", "--no-fsync")  # fmt: skip
        _, err = col.communicate(timeout=120)
        assert col.returncode == 0, err[-3000:]
        tr = train(domain, f"demos.path={store}", "loop.env_steps=20", "loop.eval_every=0",
                   "loop.final_eval_episodes=1", f"run_dir={run}")  # fmt: skip
        _, err = tr.communicate(timeout=120)
        assert tr.returncode == 0, err[-3000:]
    finally:
        stop(sim)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["demo_episodes"] == 1 and not set(summary["obs_layout"]["state"]) & set(PRIVILEGED_FIELDS)
    # The demo transitions went into the replay as the run's 26 proprio values (the store holds 35 per step).
    with np.load(run / "checkpoints" / "final" / "buffer_demo.npz") as buf:
        valid, states = buf["valid"], buf["obs.state"]
    assert valid.sum() >= 1 and states.shape[1] == 26


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ([], "set intervention.device=spacemouse|gamepad|keyboard|simulated .*or intervention.enabled=false"),
        (["intervention.enabled=false", "reward.source=classifier"], "needs reward.classifier_path"),
        (["intervention.enabled=false", "reward.source=oracle"], r"reward.source=oracle: expected one of env"),
        (["intervention.enabled=false", "env.obs=both"], "object's pose, which a robot does not measure"),
        (["intervention.enabled=false", "algo=residual"], "only algo=sac trains on a robot"),
    ],
)
def test_what_a_robot_run_cannot_do_yet_fails_at_start_up_saying_what_to_set(overrides, message) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(["robot=sim", *overrides])


def test_a_robot_key_without_a_robot_says_to_choose_one() -> None:
    with pytest.raises(ConfigError, match="no robot is chosen: add robot=<name>"):
        load_config(["robot.lockstep=true"])
