"""Transport between actors, learners and robots over ROS 2 (rclpy), or in-process for unit tests."""

from __future__ import annotations

from robot_rl.transport.base import (
    LATCHED_QOS,
    ROS_DEFAULT_QOS,
    BackpressureTimeout,
    Publisher,
    Subscription,
    TopicQos,
    Transport,
    TransportConfig,
)
from robot_rl.transport.channels import TransitionReceiver, TransitionSender, WeightsPublisher, WeightsReceiver


def make_transport(cfg: TransportConfig) -> Transport:
    """rclpy imports lazily: a process that never talks ROS 2 (single-process training) does not need it."""
    if cfg.backend == "rclpy":
        from robot_rl.transport.ros2 import RclpyTransport

        return RclpyTransport(cfg)
    if cfg.backend == "inproc":
        from robot_rl.transport.inproc import InprocTransport

        return InprocTransport(cfg)
    why = " (the pip cyclonedds backend was retired: docs/ros2_interface.md)" if cfg.backend in ("dds", "auto") else ""
    raise ValueError(f"unknown transport backend {cfg.backend!r}{why}; use 'rclpy' (ROS 2) or 'inproc' (one process)")


__all__ = [
    "LATCHED_QOS",
    "ROS_DEFAULT_QOS",
    "BackpressureTimeout",
    "Publisher",
    "Subscription",
    "TopicQos",
    "Transport",
    "TransportConfig",
    "TransitionReceiver",
    "TransitionSender",
    "WeightsPublisher",
    "WeightsReceiver",
    "make_transport",
]
