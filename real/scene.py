"""What a person standing beside the robot sees that the policy does not: where the object is and whether the task
looks done. The simulated operator's eyes, on their own ROS 2 node, apart from the env the policy acts through.

On the sim robot they read its `object_pose` topic (the simulator's cube or peg pose, in place of a person looking),
for an insertion its `fixture_pose` (where the hole is) and its `success` topic (the simulator's check, in place of a
person judging): these reach only the operator, never the policy or the reward, which is why they live here and not
in `RobotEnv`. A real cell has a person instead.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from robot_rl.real import msgs
from robot_rl.real.config import RobotConfig
from robot_rl.real.robot import SENSOR_QOS
from robot_rl.transport import Transport, TransportConfig, make_transport


@dataclass
class Sight:
    object_pos: np.ndarray  # (3,) metres, base frame
    success: bool
    object_quat: np.ndarray = field(default_factory=lambda: np.array([1.0, 0.0, 0.0, 0.0]))  # w, x, y, z
    fixture_pos: np.ndarray | None = None  # (3,) an insertion's hole top; None when not watched


class SceneWatcher:
    """The newest object pose and success flag; `look(stamp)` waits until they are at least as new as the robot
    state the operator is reacting to (a lockstep robot publishes them with the same stamp in the same tick).
    `fixture`: watch the fixture too (an insertion), as new as the object."""

    def __init__(
        self,
        robot: RobotConfig,
        transport: Transport | None = None,
        node_name: str = "robot_rl_operator",
        fixture: bool = False,
    ) -> None:
        if not robot.object_pose_topic:
            raise ValueError(f"robot {robot.name!r}: the simulated operator watches object_pose_topic, and this "
                             "config has none (a real cell has a person instead)")  # fmt: skip
        if fixture and not robot.fixture_pose_topic:
            raise ValueError(f"robot {robot.name!r}: the simulated operator of an insertion watches "
                             "fixture_pose_topic, and this config has none")  # fmt: skip
        self.tx = transport or make_transport(
            TransportConfig(backend=robot.backend, domain_id=robot.domain_id, namespace=robot.namespace,
                            node_name=node_name)
        )  # fmt: skip
        self._own = transport is None
        self._object = self.tx.subscription(robot.object_pose_topic, msgs.POSE, SENSOR_QOS)
        # Where the sim robot publishes it: on `success` when the config names none (the policy side then has none).
        self._success = self.tx.subscription(robot.success_topic or "success", msgs.BOOL, SENSOR_QOS)
        self._fixture = self.tx.subscription(robot.fixture_pose_topic, msgs.POSE, SENSOR_QOS) if fixture else None
        self._pose: tuple[np.ndarray, np.ndarray, float, float] | None = None  # (position, quat, stamp, received)
        self._fixture_at: tuple[np.ndarray, float] | None = None  # (position, stamp)
        self._flag: tuple[bool, float] | None = None  # (success, local receive time)

    def _poll(self) -> None:
        now = time.time()
        if got := self._object.take():
            self._pose = (*msgs.pose_of(got[-1]), msgs.stamp_of(got[-1]), now)
        if self._fixture is not None and (got := self._fixture.take()):
            self._fixture_at = (msgs.pose_of(got[-1])[0], msgs.stamp_of(got[-1]))
        if got := self._success.take():
            self._flag = (bool(got[-1].data), now)

    def look(self, stamp: float, timeout_s: float = 5.0) -> Sight:
        """The scene at robot time `stamp` (seconds, header clock) or later; the success flag is the first one
        received with or after that pose (the robot publishes it right after)."""
        deadline = time.monotonic() + timeout_s
        while True:
            self._poll()
            pose, flag, fix = self._pose, self._flag, self._fixture_at
            seen = pose is not None and pose[2] >= stamp - 1e-6 and flag is not None and flag[1] >= pose[3]
            if seen and (self._fixture is None or (fix is not None and fix[1] >= stamp - 1e-6)):
                return Sight(pose[0], flag[0], pose[1], fix[0] if fix is not None else None)
            if time.monotonic() > deadline:
                raise TimeoutError(f"no object pose / success flag / fixture at robot time {stamp:.3f} within "
                                   f"{timeout_s}s")  # fmt: skip
            time.sleep(0.001)

    def close(self) -> None:
        if self._own:
            self.tx.close()
