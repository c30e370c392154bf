"""`robot-rl estop press|release`: against a running sim robot, and its argument handling."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from plain_ros import PlainNode, msg_type
from real_util import spawn, stop

from robot_rl.cli import main
from robot_rl.real import estop, msgs
from robot_rl.real.config import load_robot_config
from robot_rl.real.robot import COMMAND_READER_QOS
from robot_rl.transport import TransportConfig, make_transport

pytestmark = pytest.mark.realtime


@pytest.mark.ros2
@pytest.mark.slow
def test_estop_press_holds_the_sim_robot_and_release_frees_the_next_episode(domain: int) -> None:
    """`robot-rl estop press` from a shell holds a running sim robot (its status says why); after `release`, the
    next reset frees it."""
    sim = spawn("sim-robot", "--domain", str(domain))
    try:
        with PlainNode(domain) as peer:
            status = peer.subscribe("/robot_rl/robot_status", "std_msgs/msg/String")
            peer.spin_until(lambda: bool(status) and status[-1].data == "ok", 60, "the sim robot")
            press = spawn("estop", "press", "--domain", str(domain))
            peer.spin_until(lambda: status[-1].data == "hold: estop", 30, "the hold")
            out, _ = press.communicate(timeout=30)
            assert press.returncode == 0 and "pressed on /robot_rl/estop" in out and "heard it" in out
            release = spawn("estop", "release", "--domain", str(domain))
            assert release.wait(timeout=30) == 0
            reset = peer.publisher("/robot_rl/reset", "std_msgs/msg/Int64")
            seed = msg_type("std_msgs/msg/Int64")()
            seed.data = 3
            peer.spin_until(lambda: reset.get_subscription_count() > 0, 30, "the sim robot's reset topic")
            peer.spin_until(lambda: status[-1].data.startswith("hold: estop released"), 30, "the release")

            deadline = time.monotonic() + 30
            while status[-1].data != "ok":
                assert time.monotonic() < deadline, "the robot was not freed by release + reset"
                reset.publish(seed)  # a reset request is volatile: ask again until the robot answers it
                until = time.monotonic() + 0.5
                peer.spin_until(lambda u=until: status[-1].data == "ok" or time.monotonic() > u, 5, "a reset answer")
    finally:
        stop(sim)


@pytest.mark.ros2
def test_a_live_reader_that_matches_late_still_gets_the_release(domain: int) -> None:
    """A node's volatile e-stop reader may match after the first sample (discovery is not ordered); it must still
    get the state, or it keeps the press it saw before (CI once held a sim robot after a release this way)."""
    robot = load_robot_config("sim", [f"domain_id={domain}"])
    done: list[tuple[str, int]] = []
    releaser = threading.Thread(target=lambda: done.append(estop.publish_estop(robot, False, 20.0)))
    releaser.start()
    time.sleep(0.5)  # the first sample is out before this reader exists
    tx = make_transport(TransportConfig(backend=robot.backend, domain_id=domain, namespace=robot.namespace))
    try:
        live = tx.subscription(robot.estop_topic, msgs.BOOL, COMMAND_READER_QOS)
        got: list = []
        deadline = time.monotonic() + 20
        while not got and time.monotonic() < deadline:
            got += live.take()
            time.sleep(0.02)
        releaser.join(timeout=30)
    finally:
        tx.close()
    assert done and done[0][1] >= 1
    assert got and not got[-1].data, "the late live reader never got the release"


@pytest.mark.parametrize(
    "args, problem",
    [([], "required: action"), (["hold"], "invalid choice: 'hold'"), (["press", "--robot", "nosuch"], "nosuch")],
)
def test_estop_mistakes_are_one_line(monkeypatch, capsys, args: list[str], problem: str) -> None:
    monkeypatch.setattr(estop, "publish_estop", lambda *a: pytest.fail("published despite a bad command line"))
    assert main(["estop", *args]) == 2
    err = capsys.readouterr().err
    assert problem in err and len(err.strip().splitlines()) == 1


@pytest.mark.ros2
def test_estop_nobody_heard_is_a_failure(domain: int) -> None:
    """An e-stop that reached no node must not look like it worked."""
    press = spawn("estop", "press", "--domain", str(domain), "--wait", "1")
    out, err = press.communicate(timeout=60)
    assert press.returncode == 1 and "no node listens" in err, (out, err)


@pytest.mark.ros2
@pytest.mark.slow
def test_deploy_refuses_to_start_while_the_robot_holds_an_estop(checkpoint, domain: int) -> None:
    """The e-stop outlives the process that pressed it: the robot side keeps holding, and the next deploy stops
    with exit 3 (at its reset, or at its first step if the robot's latched status reaches it only then) while
    the arm does not move."""
    sim = spawn("sim-robot", "--domain", str(domain))
    try:
        with PlainNode(domain) as peer:
            poses = peer.subscribe("/robot_rl/ee_pose", "geometry_msgs/msg/PoseStamped", "sensor")
            press = spawn("estop", "press", "--domain", str(domain))
            assert press.wait(timeout=60) == 0
            peer.spin_until(lambda: len(poses) > 5, 30, "the sim robot's TCP")
            dep = spawn("deploy", str(checkpoint), "--robot", "sim", "--domain", str(domain), "--episodes", "2",
                        "--quiet", "--robot-set", "reset_timeout_s=60")  # fmt: skip
            peer.spin_until(lambda: dep.poll() is not None, 120, "deploy to stop")
            out, err = dep.communicate()
        assert dep.returncode == 3, err[-2000:]
        assert "stopped by SafetyStop:" in err and "Traceback" not in err
        tcp = np.array([[m.pose.position.x, m.pose.position.y, m.pose.position.z] for m in poses])
        assert np.ptp(tcp, axis=0).max() < 0.003, "the arm moved while the e-stop was pressed"
    finally:
        stop(sim)
