"""Transport between actors and learners over ROS 2 (rclpy, pip-only cyclonedds, or in-process)."""

from __future__ import annotations

import importlib.util

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
    """Backends import lazily: rclpy exists only on ROS machines, cyclonedds only where installed."""
    backend = cfg.backend
    if backend == "auto":
        backend = "rclpy" if importlib.util.find_spec("rclpy") is not None else "dds"
    if backend == "rclpy":
        from robot_rl.transport.ros2 import RclpyTransport

        return RclpyTransport(cfg)
    if backend == "dds":
        from robot_rl.transport.dds import DdsTransport

        return DdsTransport(cfg)
    if backend == "inproc":
        from robot_rl.transport.inproc import InprocTransport

        return InprocTransport(cfg)
    raise ValueError(f"unknown transport backend {cfg.backend!r}")


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
