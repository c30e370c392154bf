"""The ROS 2 backend: rclpy, so our nodes are ordinary ROS 2 nodes to every other node in the graph.

We still move rosbags CDR bytes (rclpy publishes `bytes` as a serialized message and `raw=True` subscriptions hand
them back), so encoding, size limits and drop reasons are the same on every backend. rclpy needs generated type
support for each type it carries: the standard packages come with ROS, `robot_rl_msgs` is built from
`robot_rl/transport/msgs/robot_rl_msgs` (colcon in a ROS workspace, or `./dev setup` for the pip ROS 2 wheels).

No executor runs: each subscription takes straight from its rmw queue on `take_raw`, so a read always drains that
topic to its newest message, whatever the other subscriptions of the node hold (an executor's `spin_once` serves
one callback per call, which left the deploy node reading stale joint states).
"""

from __future__ import annotations

import importlib
import json
from functools import cache
from pathlib import Path
from typing import Any

from robot_rl.transport import typesys
from robot_rl.transport.base import (
    ROS_DEFAULT_QOS,
    BackpressureTimeout,
    Publisher,
    Subscription,
    TopicQos,
    Transport,
    TransportConfig,
)


class RosSetupError(RuntimeError):
    """ROS 2 (or one of the message packages we need) is not importable in this environment."""


def _ignore(_msg: object) -> None:
    """rclpy wants a callback per subscription; no executor calls it, `take_raw` takes directly."""


def _rclpy_qos(qos: TopicQos) -> Any:
    from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

    keep_all = qos.depth is None
    return QoSProfile(
        history=HistoryPolicy.KEEP_ALL if keep_all else HistoryPolicy.KEEP_LAST,
        depth=qos.max_samples if keep_all else qos.depth,
        reliability=ReliabilityPolicy.RELIABLE if qos.reliable else ReliabilityPolicy.BEST_EFFORT,
        durability=DurabilityPolicy.TRANSIENT_LOCAL if qos.transient_local else DurabilityPolicy.VOLATILE,
    )


@cache
def rclpy_msg_class(ros_type: str, distro: str = "jazzy") -> Any:
    """The generated rclpy class of `pkg/msg/Name`, checked against the definition we encode with: rosbags'
    definitions must describe the same bytes as the installed ROS package, or every message would be garbage."""
    pkg, _, name = ros_type.split("/")
    try:
        cls = getattr(importlib.import_module(f"{pkg}.msg"), name)
    except (ImportError, AttributeError) as e:
        hint = (
            "build it: `./dev setup` (pip ROS 2), or colcon build robot_rl/transport/msgs/robot_rl_msgs in your ROS "
            "workspace and source it"
            if pkg == "robot_rl_msgs"
            else f"install the ROS 2 package {pkg} (pip: ros-{pkg.replace('_', '-')}; apt: ros-<distro>-"
            f"{pkg.replace('_', '-')})"
        )
        raise RosSetupError(f"ROS 2 message type {ros_type} is not importable ({e}); {hint}") from e
    if distro != "humble" and (installed := installed_type_hash(ros_type)) is not None:
        ours = typesys.type_hash(ros_type, distro)
        if installed != ours:
            raise RosSetupError(
                f"{ros_type}: the installed ROS definition ({installed}) differs from the one robot_rl encodes "
                f"({ours}); rebuild robot_rl_msgs from this checkout, or set the transport's distro to match ROS"
            )
    return cls


def installed_type_hash(ros_type: str) -> str | None:
    """RIHS01 hash of the installed package's definition (rosidl's `share/<pkg>/msg/<Name>.json`, found from the
    generated module: `<prefix>/lib/pythonX/site-packages/<pkg>` -> `<prefix>/share/<pkg>`, for apt, colcon and pip
    installs alike); None where there is none (Humble)."""
    pkg, kind, name = ros_type.split("/")
    module = importlib.import_module(f"{pkg}.{kind}")
    for prefix in Path(module.__file__).resolve().parents:
        path = prefix / "share" / pkg / kind / f"{name}.json"
        if path.is_file():
            return json.loads(path.read_text())["type_hashes"][0]["hash_string"]
    return None


class RclpyPublisher(Publisher):
    def __init__(self, pub: Any, topic: str, ros_type: str, distro: str) -> None:
        from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy

        super().__init__(topic, ros_type, distro)
        self.pub = pub
        self._rcl_error = _rclpy.RCLError  # looked up once: publish_raw is the hot path

    def publish_raw(self, data: bytes) -> None:
        try:
            self.pub.publish(bytes(data))
        except self._rcl_error as e:  # a reliable keep-all writer whose readers did not drain within Fast DDS's 100 ms
            raise BackpressureTimeout(f"{self.topic}: {e}") from e

    def matched(self) -> int:
        return self.pub.get_subscription_count()


class RclpySubscription(Subscription):
    def __init__(self, transport: RclpyTransport, topic: str, ros_type: str, qos: TopicQos) -> None:
        from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy

        cfg = transport.cfg
        super().__init__(topic, ros_type, cfg.distro, cfg.max_message_bytes)
        self.sub = transport.node.create_subscription(
            rclpy_msg_class(ros_type, cfg.distro), topic, _ignore, _rclpy_qos(qos), raw=True
        )
        self._waitset = _rclpy.WaitSet(1, 0, 0, 0, 0, 0, transport.context.handle)

    def take_raw(self, max_n: int = 256) -> list[bytes]:
        return [raw for _, raw in self.take_received(max_n)]

    def take_received(self, max_n: int = 256) -> list[tuple[int, bytes]]:
        out: list[tuple[int, bytes]] = []
        with self.sub.handle:
            while len(out) < max_n:
                got = self.sub.handle.take_message(self.sub.msg_type, True)
                if got is None:
                    break
                out.append((got[1]["received_timestamp"], got[0]))
        return out

    def wait(self, timeout_s: float) -> bool:
        ws = self._waitset
        ws.clear_entities()
        with self.sub.handle:
            ws.add_subscription(self.sub.handle)
            ws.wait(max(0, int(timeout_s * 1e9)))
        return bool(ws.get_ready_entities("subscription"))


class RclpyTransport(Transport):
    """One rclpy context + node per transport, so domain ids of several transports never mix. rclpy leaves
    SIGINT/SIGTERM alone here: our processes save and exit on them themselves."""

    def __init__(self, cfg: TransportConfig) -> None:
        super().__init__(cfg)
        rclpy = import_rclpy()
        from rclpy.context import Context
        from rclpy.signals import SignalHandlerOptions

        self.context = Context()
        rclpy.init(context=self.context, domain_id=cfg.domain_id, signal_handler_options=SignalHandlerOptions.NO)
        self.node = rclpy.create_node(cfg.node_name, namespace=cfg.namespace, context=self.context)

    def publisher(self, topic: str, ros_type: str, qos: TopicQos = ROS_DEFAULT_QOS) -> RclpyPublisher:
        name = self.cfg.resolve(topic)
        pub = self.node.create_publisher(rclpy_msg_class(ros_type, self.cfg.distro), name, _rclpy_qos(qos))
        return RclpyPublisher(pub, name, ros_type, self.cfg.distro)

    def subscription(self, topic: str, ros_type: str, qos: TopicQos = ROS_DEFAULT_QOS) -> RclpySubscription:
        return RclpySubscription(self, self.cfg.resolve(topic), ros_type, qos)

    def close(self) -> None:
        self.node.destroy_node()
        self.context.try_shutdown()


def import_rclpy() -> Any:
    try:
        import rclpy
    except ImportError as e:
        raise RosSetupError(
            f"the ROS 2 transport needs rclpy ({e}): run `./dev setup` (pip ROS 2 wheels), or source your ROS 2 "
            "install (`source /opt/ros/<distro>/setup.bash`) before starting robot-rl"
        ) from e
    return rclpy
