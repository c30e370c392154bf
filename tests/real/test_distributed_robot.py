"""`robot-rl launch robot=sim` over real ROS 2 against `sim-robot --lockstep` processes: one actor on the arm, the
learner off it, and SIGKILLs of the actor, the learner and the sim robot mid-run; two cells whose stand-ins launch
serves itself, one of them SIGKILLed."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from plain_ros import PlainNode, msg_type
from real_util import children, latest, spawn, stop, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.ros2]
STEPS = 500
CELL_STEPS = 400


def test_killed_actor_learner_and_sim_robot_resume_lose_nothing_and_the_arm_holds_without_a_learner(
    domain: int, tmp_path: Path
) -> None:
    run, log_path = tmp_path / "run", tmp_path / "launch.log"
    sim = spawn("sim-robot", "--lockstep", "--domain", str(domain))
    log = log_path.open("w")
    launch = subprocess.Popen(
        [sys.executable, "-m", "robot_rl.cli", "launch", "robot=sim", "robot.lockstep=true",
         f"robot.domain_id={domain}", f"distributed.transport.domain_id={domain}", "robot.reset_timeout_s=2",
         "robot.reset=home", "robot.scene_reset=topic", "robot.home_box=[0.03,0.03,0.02]",
         "intervention.enabled=false", "distributed.learner_timeout_s=0.5", f"loop.env_steps={STEPS}",
         "loop.eval_every=0", "loop.checkpoint_every=50", "loop.final_eval_episodes=1", f"run_dir={run}",
         "threads=1", "profile=cpu"],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        start_new_session=True,  # a failed test kills launch's learner and actor too, not only launch
    )  # fmt: skip
    poses: list = []
    try:
        with PlainNode(domain) as peer:  # watches the arm as any ROS 2 tool would
            peer.node.create_subscription(
                msg_type("geometry_msgs/msg/PoseStamped"), "/robot_rl/ee_pose",
                lambda m: poses.append((time.time(), m.header.stamp.sec + 1e-9 * m.header.stamp.nanosec,
                                        m.pose.position.x, m.pose.position.y, m.pose.position.z)), 10,
            )  # fmt: skip

            def wait_steps(n: int, what: str) -> None:
                try:
                    peer.spin_until(lambda: latest(run) >= n or launch.poll() is not None, 90, what)
                except TimeoutError as e:  # the launch log says which side stalled
                    raise AssertionError(f"{e} (checkpoint at {latest(run)})\n{log_path.read_text()[-3000:]}") from e
                assert launch.poll() is None, log_path.read_text()[-3000:]

            wait_steps(100, "a first checkpoint")
            assert set(children(launch.pid)) == {"learner", "actor"}  # exactly one actor on the one arm
            os.kill(children(launch.pid)["actor"], signal.SIGKILL)
            wait_steps(200, "training on with the restarted actor")

            committed = latest(run)
            os.kill(children(launch.pid)["learner"], signal.SIGKILL)
            killed = time.time()
            peer.spin_until(lambda: "resumed" in log_path.read_text(), 90, "the learner resumed")
            resumed = time.time()
            wait_steps(committed + 100, "training on with the resumed learner")

            sim.kill()
            sim.wait()
            time.sleep(1.0)
            sim = spawn("sim-robot", "--lockstep", "--domain", str(domain))
            peer.spin_until(lambda: launch.poll() is not None, 120, "the run to finish")
        assert launch.wait() == 0, log_path.read_text()[-3000:]
    finally:
        stop(sim)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(launch.pid, signal.SIGKILL)  # leftover nodes would talk on this domain in later tests
        launch.wait()
        log.close()
    out = log_path.read_text()
    # The learner resumed from what it had committed, and nothing an actor sent to a live learner was lost.
    assert f"from step_{committed:08d}: {committed} env steps" in out, out[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["env_steps"] == STEPS and summary["updates"] == STEPS
    assert summary["robot"] == "sim" and summary["evals"] == []  # the learner never touched the arm
    assert "actor 0 exited with -9: restarting" in out  # launch replaced the killed actor (a new stream)
    # Streams are counted from the resumed learner's start: the one actor it met lost nothing.
    assert len(summary["actors"]) == 1 and all(a["lost"] == 0 for a in summary["actors"].values())
    # The sim robot died under a step (that episode was dropped, not stored as failed) or a reset (retried).
    assert "episode aborted" in out or "cannot start an episode" in out
    # The arm held while the learner was gone: once the actor ran out of policy steps (10 per version, then the 0.5 s
    # learner timeout; about a second in lockstep, 1.06 s seen on a loaded box), no newer pose was stamped until the
    # new learner was up, and the arm stood still through that wait.
    gone = [p for p in poses if killed < p[0] < resumed]
    last_step = max(p[1] for p in gone)  # the newest physics stamp while the learner was gone
    assert last_step < killed + 2.0, last_step - killed  # seconds, not the whole outage
    held = [p for p in gone if p[0] > last_step + 0.2]  # re-published at 20 Hz while idle, after the last step
    assert resumed - last_step > 1.0 and len(held) > 10, (resumed - last_step, len(held))
    stamps, xyz = np.array([p[1] for p in held]), np.array([p[2:] for p in held])
    assert stamps.max() == last_step and np.ptp(xyz, axis=0).max() == 0.0


def standin(launch_pid: int, domain: int) -> int:
    """The pid of the `sim-robot` that launch serves on `domain`."""
    for c in Path(f"/proc/{launch_pid}/task/{launch_pid}/children").read_text().split():
        cmd = Path(f"/proc/{c}/cmdline").read_bytes().decode().split("\0")
        if "sim-robot" in cmd and cmd[cmd.index("--domain") + 1] == str(domain):
            return int(c)
    raise AssertionError(f"launch serves no stand-in on domain {domain}")


def test_launch_serves_two_stand_in_cells_drives_them_on_one_learner_and_restarts_a_killed_one(
    domain: int, tmp_path: Path
) -> None:
    """Two sim-robot stand-ins that launch serves itself, each cell on its own ROS domain, one actor each (launch
    gives actor i its cell's domain), one learner on the Zenoh plane, so no DDS links the nodes. One stand-in is
    SIGKILLed mid-run: launch serves it again and the run finishes."""
    run, log_path = tmp_path / "run", tmp_path / "launch.log"
    cells = [domain, domain + 2]  # the same xdist worker's residue class (tests/plain_ros.py random_domain)
    with log_path.open("w") as log:
        launch = subprocess.Popen(
            [sys.executable, "-m", "robot_rl.cli", "launch", "robot=sim", "robot.lockstep=true",
             f"distributed.cell_domains=[{cells[0]},{cells[1]}]", "distributed.standins=true",
             "robot.reset_timeout_s=5", "intervention.enabled=false", f"loop.env_steps={CELL_STEPS}",
             "loop.eval_every=0", "loop.checkpoint_every=100", "loop.final_eval_episodes=1", f"run_dir={run}",
             "threads=1", "profile=cpu"],
            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"}, start_new_session=True,
        )  # fmt: skip
        try:
            wait_until(lambda: latest(run) >= 100 or launch.poll() is not None, 180, "a first checkpoint")
            os.kill(standin(launch.pid, cells[0]), signal.SIGKILL)
            assert launch.wait(timeout=300) == 0, log_path.read_text()[-3000:]
            for d in cells:  # launch stopped the stand-ins it served
                assert not subprocess.run(["pgrep", "-f", f"sim-robot .*--domain {d} "], capture_output=True).stdout
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(launch.pid, signal.SIGKILL)
            launch.wait()
    assert f"stand-in {cells[0]} exited with -9: restarting" in log_path.read_text()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["env_steps"] == CELL_STEPS, log_path.read_text()[-3000:]
    actors = summary["actors"]
    assert sorted(a.split("-")[0] for a in actors) == ["actor0", "actor1"]  # both cells trained the one learner
    assert all(a["transitions"] > 0 and a["lost"] == 0 for a in actors.values()), actors
