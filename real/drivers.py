"""Stock drivers beyond their state topics: what each says about faults and stops, how it recovers, and a stand-in.

A robot config's `driver` (franka | ur5e | "": a robot that speaks only our topics, the sim robot) picks two faces
of one driver, each in that driver's module (`real/franka.py`, `real/ur.py`):
- `DriverLink`, the robot side: `RobotEnv` polls it every step for the driver's own hold (Franka robot mode and
  hardware state, UR safety mode and program state, MoveIt Servo's status) and asks it to recover at reset (the
  driver's services where it offers them, a one-line prompt where it does not).
- `StandinFace`, the sim side: `sim-robot --driver NAME` serves the sim arm with that driver's topics, types, QoS,
  frames, services and fault behaviour, read from the driver's sources, so tests and benches meet what a lab's
  robot PC runs.
A hold reason that starts with one of the robot config's `policy_holds` (a force reflex) is the policy's safety
failure; any other (a fault, a protective stop, a halted servo) aborts the episode, which is re-run.
"""

from __future__ import annotations

import atexit
import importlib
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from robot_rl.errors import ConfigError

if TYPE_CHECKING:
    from robot_rl.real.config import RobotConfig
    from robot_rl.real.sim_robot import SimRobot

log = logging.getLogger("robot_rl.drivers")

# name -> (its module; there: the link, the stand-in face, the map of its joint names to the sim arm's)
DRIVERS = {
    "franka": ("robot_rl.real.franka", "FrankaLink", "FrankaStandin", "FRANKA_JOINTS"),
    "ur5e": ("robot_rl.real.ur", "UrLink", "UrStandin", "UR_JOINTS"),
}


def rcl_qos(latched: bool = False, reliable: bool = True, depth: int | None = None) -> Any:
    """A QoS as the drivers declare theirs: `latched` is transient local (depth 1 unless given), as on-change status
    topics publish."""
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

    return QoSProfile(
        depth=depth or (1 if latched else 10),
        reliability=ReliabilityPolicy.RELIABLE if reliable else ReliabilityPolicy.BEST_EFFORT,
        durability=DurabilityPolicy.TRANSIENT_LOCAL if latched else DurabilityPolicy.VOLATILE,
    )


class RclNode:
    """A plain rclpy node in a context of its own, spun by a thread: the drivers' services and actions are not our
    transport's. Two executor threads: an action's execute callback waits in one while the other serves.

    Closed at exit if not before: one still spinning when the interpreter ends aborts the process ("terminate called
    without an active exception", 29 exits of 30 with two busy cores), whatever exit code it was ending with."""

    def __init__(self, name: str, cfg: RobotConfig) -> None:
        import rclpy
        from rclpy.context import Context
        from rclpy.executors import MultiThreadedExecutor

        self.context = Context()
        rclpy.init(context=self.context, domain_id=cfg.domain_id)
        self.node = rclpy.create_node(name, namespace=cfg.namespace.rstrip("/") or "/", context=self.context)
        self.executor = MultiThreadedExecutor(num_threads=2, context=self.context)
        self.executor.add_node(self.node)
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()
        atexit.register(self.close)

    def _spin(self) -> None:
        while self.context.ok():
            try:
                self.executor.spin_once(timeout_sec=0.05)
            except Exception:  # shut down under us
                return
            # A real pause between spins: rclpy's MultiThreadedExecutor was seen spinning without a wait, the GIL
            # held, so that the thread waiting on an action's future never ran again (15 min in CI).
            time.sleep(0.0005)

    def close(self) -> None:
        atexit.unregister(self.close)
        self.context.try_shutdown()
        self._thread.join(timeout=2.0)
        self.executor.shutdown()
        self.node.destroy_node()


class DriverLink:
    """The robot side of a stock driver (`RobotEnv` owns one per env; its own rclpy node where it needs services)."""

    def __init__(self, cfg: RobotConfig) -> None:
        self.cfg = cfg

    def poll(self) -> str | None:
        """The driver's hold now, as one line (None: the driver lets the arm move)."""
        return None

    def recover(self, prompt: Any) -> None:
        """At reset, while `poll()` reports a hold: clear it with the driver's services, or ask the person at the
        robot through `prompt(text)` (a terminal's `input`) where the driver offers none."""

    def close(self) -> None:
        """Release the link's node and threads."""


class StandinFace:
    """The sim side of a stock driver: `SimRobot` calls these hooks; the base face is the sim robot's own."""

    # Whether our Float64 `gripper_topic` moves the sim fingers; a driver whose gripper takes an action serves that
    # action itself (the bridge's goals arrive there), as its real gripper ignores our topic.
    reads_gripper_topic = True
    # The contact force (N) on the hand at which the arm holds: the sim env's `ee_force_limit` (a Franka's reflex
    # thresholds) unless the driver's robot stops elsewhere.
    force_limit_n: float | None = None

    def __init__(self, robot: SimRobot) -> None:
        self.robot = robot

    def takes_commands(self) -> bool:
        """Whether the arm acts on Cartesian commands now (a protective stop or a halted servo drops them)."""
        return True

    def state(self, out: dict[str, Any], stamp: float) -> dict[str, Any]:
        """The state messages to publish this tick (publisher key -> message), in the driver's shape."""
        return out

    def on_hold(self, reason: str) -> None:
        """The arm was just held (force limit, command watchdog)."""

    def tick(self, now: float) -> None:
        """Once per loop iteration: the driver's own services, actions, status topics and timers."""

    def drill(self, kind: str) -> None:
        """A fault for tests and benches, by name (each driver's own; also on its `<driver>_standin/fault` topic,
        std_msgs/String, and `sim-robot --drill` from the start)."""
        raise ConfigError(f"drill {kind!r}: the sim robot's own face has no driver faults (sim-robot --driver)")

    def serve_drills(self, node: Any, topic: str) -> None:
        """`drill` on a topic: a kind it does not know is logged, and the stand-in goes on."""
        from std_msgs.msg import String

        def on(m: Any) -> None:
            try:
                self.drill(m.data)
            except ConfigError as e:
                log.error("%s", e)

        node.create_subscription(String, topic, on, rcl_qos())

    def close(self) -> None:
        """Release the face's node and threads."""


def driver_part(name: str, part: int) -> Any:
    """`DRIVERS[name]`'s link (1), stand-in face (2) or joint map (3), imported when asked for."""
    if name not in DRIVERS:
        raise ConfigError(f"driver={name!r}: expected one of {', '.join(DRIVERS)} or empty (our own topics)")
    return getattr(importlib.import_module(DRIVERS[name][0]), DRIVERS[name][part])


def make_link(cfg: RobotConfig) -> DriverLink | None:
    """The robot config's driver link; None for a robot that reports through our status topic."""
    return driver_part(cfg.driver, 1)(cfg) if cfg.driver else None


def face_class(name: str) -> type[StandinFace]:
    """`sim-robot --driver NAME`'s face class; the sim robot's own for ""."""
    return driver_part(name, 2) if name else StandinFace


def make_face(name: str, robot: SimRobot) -> StandinFace:
    """`sim-robot --driver NAME`'s face; the sim robot's own for ""."""
    return face_class(name)(robot)
