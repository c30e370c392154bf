"""A plain rclpy node, written the way any ROS 2 user would: generated message classes, callbacks, an executor,
default or sensor-data QoS, default Fast DDS settings. It imports nothing from robot_rl, so what it accepts is what
a stock ROS 2 graph accepts. Also the one draw of a ROS domain for a test's processes, of a free loopback port, and
of a CA with a certificate."""

from __future__ import annotations

import importlib
import os
import random
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import rclpy
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data

QOS = {
    "default": QoSProfile(depth=10),
    "sensor": qos_profile_sensor_data,
    "latched": QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL),
}

# Not the global `random`: an in-process `train` seeds it, and two tests drawing after the same seed would share a
# domain, and with it the other's latched messages (an e-stop left pressed).
_DRAW = random.SystemRandom()


def random_domain(lo: int = 1, hi: int = 200) -> int:
    """A ROS domain for one test's processes, so tests never see each other's nodes (discovery stays on this host).
    DDS takes 0-232; the in-process bus takes any int, so its tests draw wider. Each xdist worker draws from its own
    residue class (gw0 the even ids of two workers), so tests side by side never share one."""
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:])
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    return _DRAW.choice(range(lo + (worker - lo) % workers, hi + 1, workers))


def free_port() -> int:
    """A TCP port on loopback that nothing listens on now (a Zenoh learner's endpoint)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_ca(root: Path, name: str, ip: str = "127.0.0.1") -> dict[str, str]:
    """A CA and one certificate for `ip` signed by it, made with openssl as a lab would: the paths of the CA, the
    certificate and its key (`distributed.zenoh.tls`'s ca, cert, key)."""

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=root)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", f"/CN={name}-ca",
        "-keyout", f"{name}-ca.key", "-out", f"{name}-ca.pem")  # fmt: skip
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={ip}", "-keyout", f"{name}.key",
        "-out", f"{name}.csr")  # fmt: skip
    (root / f"{name}.ext").write_text(f"subjectAltName=IP:{ip},DNS:localhost\n")
    run("x509", "-req", "-in", f"{name}.csr", "-CA", f"{name}-ca.pem", "-CAkey", f"{name}-ca.key",
        "-CAcreateserial", "-days", "1", "-out", f"{name}.pem", "-extfile", f"{name}.ext")  # fmt: skip
    return {"ca": str(root / f"{name}-ca.pem"), "cert": str(root / f"{name}.pem"), "key": str(root / f"{name}.key")}


def host_address() -> str | None:
    """This host's address on its default route, not loopback (no packet is sent), or None without one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("203.0.113.1", 9))  # TEST-NET-3: routed, never reached
        except OSError:
            return None
        ip = s.getsockname()[0]
    return None if ip.startswith("127.") else ip


def msg_type(ros_type: str) -> Any:
    pkg, _, name = ros_type.split("/")
    return getattr(importlib.import_module(f"{pkg}.msg"), name)


class PlainNode:
    def __init__(self, domain: int, name: str = "plain_peer") -> None:
        self.context = Context()
        rclpy.init(context=self.context, domain_id=domain)
        self.node = rclpy.create_node(name, context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)

    def subscribe(self, topic: str, ros_type: str, qos: str = "default") -> list[Any]:
        got: list[Any] = []
        self.node.create_subscription(msg_type(ros_type), topic, got.append, QOS[qos])
        return got

    def publisher(self, topic: str, ros_type: str, qos: str = "default") -> Any:
        return self.node.create_publisher(msg_type(ros_type), topic, QOS[qos])

    def spin_until(self, pred: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not pred():
            if time.monotonic() > deadline:
                raise TimeoutError(f"plain rclpy node: timed out waiting for {what}")
            self.executor.spin_once(timeout_sec=0.02)

    def node_endpoints(self, name: str, namespace: str) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
        """(publishers, subscriptions) of a node as the ROS graph attributes them: topic -> types."""
        pubs = self.node.get_publisher_names_and_types_by_node(name, namespace)
        subs = self.node.get_subscriber_names_and_types_by_node(name, namespace)
        return dict(pubs), dict(subs)

    def close(self) -> None:
        self.executor.shutdown()
        self.node.destroy_node()
        self.context.try_shutdown()

    def __enter__(self) -> PlainNode:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
