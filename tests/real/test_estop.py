"""`robot-rl estop press|release`: argument handling, and what it hands the transport (no ROS graph needed)."""

from __future__ import annotations

import pytest

from robot_rl.cli import main
from robot_rl.real import estop, msgs
from robot_rl.real.config import load_robot_config


class FakeTransport:
    def __init__(self) -> None:
        self.published: list[tuple[str, str, object, bool]] = []
        self.closed = False

    def publisher(self, topic: str, ros_type: str, qos: object) -> FakeTransport:
        self.topic, self.ros_type, self.qos = topic, ros_type, qos
        return self

    def publish(self, msg: object) -> None:
        self.published.append((self.topic, self.ros_type, self.qos, msg.data))

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize("action, pressed", [("press", True), ("release", False)])
def test_estop_publishes_on_the_robots_latched_topic(monkeypatch, capsys, action: str, pressed: bool) -> None:
    import robot_rl.transport as transport

    fake, configs = FakeTransport(), []
    monkeypatch.setattr(transport, "make_transport", lambda cfg: configs.append(cfg) or fake)
    assert main(["estop", action, "--robot", "franka", "--domain", "7", "--linger", "0"]) == 0
    topic = load_robot_config("franka").estop_topic
    assert fake.published == [(topic, msgs.BOOL, transport.LATCHED_QOS, pressed)] and fake.closed
    assert configs[0].domain_id == 7
    assert f"{'pressed' if pressed else 'released'} on {configs[0].resolve(topic)}" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args, problem",
    [([], "required: action"), (["hold"], "invalid choice: 'hold'"), (["press", "--robot", "nosuch"], "nosuch")],
)
def test_estop_mistakes_are_one_line(monkeypatch, capsys, args: list[str], problem: str) -> None:
    monkeypatch.setattr(estop, "publish_estop", lambda *a: pytest.fail("published despite a bad command line"))
    assert main(["estop", *args]) == 2
    err = capsys.readouterr().err
    assert problem in err and len(err.strip().splitlines()) == 1
