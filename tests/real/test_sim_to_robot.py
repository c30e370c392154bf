"""From the simulator onto the (sim) robot: a sim camera checkpoint runs unchanged on `robot-rl sim-robot` in its own
process, and a robot run starts from it (`init_from`), in real time, over ROS 2 on this host."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from real_util import random_domain, spawn, stop
from safetensors import safe_open

from robot_rl.types import PRIVILEGED_FIELDS

pytestmark = [pytest.mark.slow, pytest.mark.realtime]
EPISODES = 10
ROBOT_RUN_EPISODES = 5  # the robot run evaluates its unchanged policy twice (at step 0 and at the end): 5 each
NO_TRACKER = "object_pose_topic=''"  # the robot config names no object pose: a real cell without a tracker


SEED = 1_000_000  # the first evaluation seed of a training run with seed=0: both sides run the same episodes


def sim_robot(domain: int) -> subprocess.Popen:
    return spawn("sim-robot", "--domain", str(domain), "--cameras", "front,wrist")  # real time, default rates


@pytest.fixture(scope="module")
def deployed(camera_run: Path) -> dict:
    """`robot-rl deploy` of the sim checkpoint: EPISODES episodes against a sim robot process."""
    domain = random_domain()
    sim = sim_robot(domain)
    try:
        dep = spawn("deploy", str(camera_run), "--robot", "sim", "--domain", str(domain), "--episodes", str(EPISODES),
                    "--seed", str(SEED), "--quiet", "--robot-set", NO_TRACKER)  # fmt: skip
        out, err = dep.communicate(timeout=300)
        assert dep.returncode == 0, err[-3000:]
    finally:
        stop(sim)
    return json.loads(out)


def test_a_sim_camera_checkpoint_runs_unchanged_on_the_sim_robot(camera_run: Path, deployed: dict) -> None:
    summary = json.loads((camera_run / "summary.json").read_text())
    assert summary["obs_layout"]["cameras"] == ["front", "wrist"]
    assert not set(summary["obs_layout"]["state"]) & set(PRIVILEGED_FIELDS)
    print(f"\nsim {summary['final_success_rate']:.2f} -> sim robot {deployed['success_rate']:.2f}, aborted "
          f"{deployed['aborted_episodes']}, control {deployed['control']}")  # fmt: skip
    assert deployed["success_rate"] >= 0.8


def test_a_real_time_robot_run_starts_from_the_sim_checkpoint(
    camera_run: Path, deployed: dict, domain: int, tmp_path: Path
) -> None:
    """No updates (learning_starts past the budget): the run's step-0 evaluation and its final weights are the sim
    policy's, and it evaluates like the sim checkpoint deployed on the same episodes."""
    run = tmp_path / "run"
    sim = sim_robot(domain)
    try:
        tr = spawn("train", "robot=sim", f"robot.domain_id={domain}", f"robot.{NO_TRACKER}", "obs=pixels",
                   f"init_from={camera_run}", "intervention.enabled=false", "loop.env_steps=20",
                   "loop.learning_starts=1000", "loop.eval_every=0", f"loop.final_eval_episodes={ROBOT_RUN_EPISODES}",
                   "loop.eval_at_start=true", f"run_dir={run}", "threads=1")  # fmt: skip
        _, err = tr.communicate(timeout=400)
        assert tr.returncode == 0, err[-3000:]
    finally:
        stop(sim)
    summary = json.loads((run / "summary.json").read_text())
    start = summary["evals"][0]
    same = np.mean([e["success"] for e in deployed["per_episode"][:ROBOT_RUN_EPISODES]])  # the same seeds
    print(f"\nrobot run at step 0 {start['success_rate']:.2f}, sim checkpoint deployed {same:.2f}")
    assert summary["init_from"] == str(camera_run / "checkpoints" / "final")  # the folder whose pipeline was read
    assert start["env_steps"] == 0 and summary["updates"] == 0
    assert abs(start["success_rate"] - same) <= 0.4 and start["success_rate"] >= 0.6
    final = [safe_open(str(r / "checkpoints" / "final" / "model.safetensors"), "pt") for r in (run, camera_run)]
    ours, theirs = final
    assert all((ours.get_tensor(k) == theirs.get_tensor(k)).all() for k in theirs.keys() if k.startswith("policy."))


def test_init_from_a_checkpoint_of_another_layout_fails_in_one_line(pickcube_run: Path, domain: int) -> None:
    tr = spawn("train", "robot=sim", f"robot.domain_id={domain}", "obs=pixels", f"init_from={pickcube_run}",
               "intervention.enabled=false", "loop.env_steps=10")  # fmt: skip
    _, err = tr.communicate(timeout=120)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert tr.returncode == 2 and "observes another layout than this run" in lines[-1], err[-2000:]
