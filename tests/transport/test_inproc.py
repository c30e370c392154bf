"""The in-process backend keeps the same QoS semantics the data plane relies on."""

from __future__ import annotations

import pytest

from robot_rl.transport import BackpressureTimeout, TopicQos, TransportConfig, make_transport, typesys


def test_keep_all_blocks_instead_of_dropping_and_latched_reaches_late_joiners() -> None:
    with make_transport(TransportConfig(backend="inproc", domain_id=1)) as t:
        qos = TopicQos(depth=None, max_samples=2, max_blocking_s=0.05)
        pub, sub = t.publisher("x", "std_msgs/msg/String", qos), t.subscription("x", "std_msgs/msg/String", qos)
        String = typesys.msg_class("std_msgs/msg/String")
        pub.publish(String(data="a"))
        pub.publish(String(data="b"))
        with pytest.raises(BackpressureTimeout):
            pub.publish(String(data="c"))
        assert [m.data for m in sub.take()] == ["a", "b"]
        latched = TopicQos(transient_local=True, depth=1)
        t.publisher("l", "std_msgs/msg/String", latched).publish(String(data="v1"))
        assert [m.data for m in t.subscription("l", "std_msgs/msg/String", latched).take()] == ["v1"]
