"""rclpy backend for robot PCs with a ROS 2 install. Deliberately thin: rclpy already speaks ROS 2.

We still move rosbags CDR bytes (rclpy publishes `bytes` as a serialized message and `raw=True`
subscriptions hand them back), so encoding, limits and drop reasons are the same as on the DDS backend.
rclpy needs generated type support for every type: robot_rl_msgs must be built in the ROS workspace from
the .msg files shipped in `robot_rl/transport/msgs/robot_rl_msgs/msg`.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from robot_rl.transport.base import ROS_DEFAULT_QOS, Publisher, Subscription, TopicQos, Transport, TransportConfig


def _rclpy_qos(qos: TopicQos) -> Any:
    from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

    keep_all = qos.depth is None
    return QoSProfile(
        history=HistoryPolicy.KEEP_ALL if keep_all else HistoryPolicy.KEEP_LAST,
        depth=qos.max_samples if keep_all else qos.depth,
        reliability=ReliabilityPolicy.RELIABLE if qos.reliable else ReliabilityPolicy.BEST_EFFORT,
        durability=DurabilityPolicy.TRANSIENT_LOCAL if qos.transient_local else DurabilityPolicy.VOLATILE,
    )


class RclpyPublisher(Publisher):
    def __init__(self, pub: Any, topic: str, ros_type: str, distro: str) -> None:
        super().__init__(topic, ros_type, distro)
        self.pub = pub

    def publish_raw(self, data: bytes) -> None:
        self.pub.publish(data)

    def matched(self) -> int:
        return self.pub.get_subscription_count()


class RclpySubscription(Subscription):
    def __init__(self, transport: RclpyTransport, topic: str, ros_type: str, qos: TopicQos) -> None:
        cfg = transport.cfg
        super().__init__(topic, ros_type, cfg.distro, cfg.max_message_bytes)
        self.transport = transport
        self.queue: deque[bytes] = deque()
        self.sub = transport.node.create_subscription(
            transport.msg_class(ros_type), topic, self.queue.append, _rclpy_qos(qos), raw=True
        )

    def take_raw(self, max_n: int = 256) -> list[bytes]:
        self.transport.executor.spin_once(timeout_sec=0)
        return [self.queue.popleft() for _ in range(min(max_n, len(self.queue)))]

    def wait(self, timeout_s: float) -> bool:
        if not self.queue:
            self.transport.executor.spin_once(timeout_sec=timeout_s)
        return bool(self.queue)


class RclpyTransport(Transport):
    """One rclpy context + node per transport, so domain ids of several transports never mix."""

    def __init__(self, cfg: TransportConfig) -> None:
        super().__init__(cfg)
        import rclpy
        from rclpy.context import Context
        from rclpy.executors import SingleThreadedExecutor

        self.context = Context()
        rclpy.init(context=self.context, domain_id=cfg.domain_id)
        self.node = rclpy.create_node(cfg.node_name, namespace=cfg.namespace, context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)

    @staticmethod
    def msg_class(ros_type: str) -> Any:
        from rosidl_runtime_py.utilities import get_message

        return get_message(ros_type)

    def publisher(self, topic: str, ros_type: str, qos: TopicQos = ROS_DEFAULT_QOS) -> RclpyPublisher:
        name = self.cfg.resolve(topic)
        pub = self.node.create_publisher(self.msg_class(ros_type), name, _rclpy_qos(qos))
        return RclpyPublisher(pub, name, ros_type, self.cfg.distro)

    def subscription(self, topic: str, ros_type: str, qos: TopicQos = ROS_DEFAULT_QOS) -> RclpySubscription:
        return RclpySubscription(self, self.cfg.resolve(topic), ros_type, qos)

    def close(self) -> None:
        self.executor.shutdown()
        self.node.destroy_node()
        self.context.try_shutdown()
