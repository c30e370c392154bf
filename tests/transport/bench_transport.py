"""Throughput/latency numbers for the transport report: `python tests/transport/bench_transport.py`.

Sender runs in a subprocess (like a real actor); loopback only. Not a test: timing on a shared box is noisy.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from conftest import make_episode, wait_until  # noqa: E402  (also sets the loopback CYCLONEDDS_URI)

from robot_rl.transport import (  # noqa: E402
    TransitionReceiver,
    TransitionSender,
    TransportConfig,
    WeightsPublisher,
    WeightsReceiver,
    make_transport,
    typesys,
)
from robot_rl.transport.channels import BATCH_T, encode_batch  # noqa: E402

DOMAIN = int(os.environ["ROBOT_RL_TEST_DOMAIN"])
N, BATCH = 2000, 16


def cfg(name: str) -> TransportConfig:
    return TransportConfig(backend="dds", domain_id=DOMAIN, task="bench", node_name=name)


def sender(cams: int) -> None:
    tr = make_transport(cfg("bench_tx"))
    tx = TransitionSender(tr, "bench", batch_size=BATCH)
    eps = make_episode(N, cams=tuple(f"c{i}" for i in range(cams)), hw=128)
    for t in eps:
        t.terminated = False
    wait_until(lambda: tx.pub.matched() == 1)
    for t in eps:
        tx.add(t)
    tx.flush()
    tx.pub.writer.wait_for_acks(10**10)
    tr.close()


def dds_rate(cams: int) -> tuple[float, float]:
    eps = make_episode(BATCH, cams=tuple(f"c{i}" for i in range(cams)), hw=128)
    for t in eps:
        t.terminated = False
    wire = len(typesys.serialize(encode_batch(eps, "bench", "b", 0, 0), BATCH_T)) / BATCH
    with make_transport(cfg("bench_rx")) as tr:
        rx = TransitionReceiver(tr)
        proc = subprocess.Popen([sys.executable, __file__, "send", str(cams)])
        got = rx.poll(timeout_s=30.0)
        t0, n = time.perf_counter(), len(got)
        while n < N:
            n += len(rx.poll(timeout_s=1.0))
        dt = time.perf_counter() - t0
        proc.wait()
    return (N - len(got)) / dt, wire


def tcp_rate(nbytes: int) -> float:
    """Same bytes per transition pushed through a raw loopback socket (no encoding, no decoding)."""
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]
    payload = b"\0" * int(nbytes * BATCH)
    code = f"import socket;s=socket.create_connection(('127.0.0.1',{port}));p=bytes({len(payload)})\n"
    code += f"for _ in range({N // BATCH}): s.sendall(p)\ns.close()"
    proc = subprocess.Popen([sys.executable, "-c", code])
    conn, _ = srv.accept()
    t0, total = time.perf_counter(), 0
    while chunk := conn.recv(1 << 20):
        total += len(chunk)
    dt = time.perf_counter() - t0
    proc.wait()
    return total / nbytes / dt


def latency() -> tuple[float, float]:
    with make_transport(cfg("ping")) as a, make_transport(cfg("pong")) as b:
        string = typesys.msg_class("std_msgs/msg/String")
        ping, ping_in = a.publisher("ping", "std_msgs/msg/String"), b.subscription("ping", "std_msgs/msg/String")
        pong, pong_in = b.publisher("pong", "std_msgs/msg/String"), a.subscription("pong", "std_msgs/msg/String")
        wait_until(lambda: ping.matched() == 1 and pong.matched() == 1)
        rtts = []
        for i in range(500):
            t0 = time.perf_counter()
            ping.publish(string(data=str(i)))
            while not ping_in.take_raw():
                ping_in.wait(1.0)
            pong.publish(string(data=str(i)))
            while not pong_in.take():
                pong_in.wait(1.0)
            rtts.append(time.perf_counter() - t0)
    return float(np.percentile(rtts, 50) * 1e6), float(np.percentile(rtts, 99) * 1e6)


def weights(n_params: int) -> float:
    with make_transport(cfg("wl")) as a, make_transport(cfg("wa")) as b:
        pub, rx = WeightsPublisher(a), WeightsReceiver(b)
        wait_until(lambda: pub.chunks.matched() == 1)
        sd = {"w": torch.randn(n_params)}
        t0 = time.perf_counter()
        pub.publish(sd, 1)
        while rx.poll(0.05) is None:
            pass
        return time.perf_counter() - t0


def main() -> None:
    for cams in (0, 2):
        rate, wire = dds_rate(cams)
        (t,) = make_episode(1, cams=tuple(f"c{i}" for i in range(cams)), hw=128)
        raw = sum(v.nbytes for v in (*t.obs.values(), *t.next_obs.values(), t.action))
        tcp = tcp_rate(wire)
        print(f"cams={cams}: DDS {rate:,.0f} tr/s {rate * wire / 1e6:.1f} MB/s | raw TCP {tcp:,.0f} tr/s "
              f"{tcp * wire / 1e6:.1f} MB/s | wire {wire:,.0f} B/tr vs raw arrays {raw:,} B/tr")  # fmt: skip
    p50, p99 = latency()
    print(f"round trip std_msgs/String: p50 {p50:.0f} us p99 {p99:.0f} us")
    for n in (1_000_000, 20_000_000):
        print(f"weights {n:,} float32: {weights(n):.2f} s")


if __name__ == "__main__":
    if sys.argv[1:2] == ["send"]:
        sender(int(sys.argv[2]))
    else:
        main()
