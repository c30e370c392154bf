"""The sim robot and the deployment node as separate processes over ROS 2 (rclpy, this host only)."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf
from real_util import spawn, stop, wait_until

from robot_rl.algos.residual import ResidualConfig
from robot_rl.algos.sac import SAC, SACConfig
from robot_rl.checkpoint import Checkpoint, save_checkpoint
from robot_rl.config import TrainConfig
from robot_rl.demos.store import EpisodeStore
from robot_rl.envs import make_env
from robot_rl.evaluation import evaluate_checkpoint
from robot_rl.real import msgs
from robot_rl.real.config import load_robot_config
from robot_rl.real.robot import SENSOR_QOS, RobotEnv, StaleDataError
from robot_rl.sim.config import EnvConfig
from robot_rl.transport import TransportConfig, make_transport
from robot_rl.types import ObsLayout

pytestmark = [pytest.mark.slow, pytest.mark.realtime]
EPISODES = 8


def spy_transport(domain: int):
    return make_transport(TransportConfig(backend="rclpy", domain_id=domain, node_name="spy"))


def deploy_against_sim_robot(checkpoint: Path, domain: int, store: Path) -> dict:
    """`robot-rl deploy` of EPISODES episodes, recorded to `store`, against a sim robot process; its summary."""
    sim = spawn("sim-robot", "--domain", str(domain))
    try:
        dep = spawn("deploy", str(checkpoint), "--robot", "sim", "--domain", str(domain), "--episodes", str(EPISODES),
                    "--record", str(store), "--quiet", "--robot-set", "reset_timeout_s=60")  # fmt: skip
        out, err = dep.communicate(timeout=240)
        assert dep.returncode == 0, err[-3000:]
    finally:
        stop(sim)
    return json.loads(out)


def test_deployed_policy_matches_its_sim_success_rate(checkpoint: Path, domain: int, tmp_path: Path) -> None:
    summary = deploy_against_sim_robot(checkpoint, domain, tmp_path / "store")
    direct = evaluate_checkpoint(Checkpoint(checkpoint), EPISODES)  # same seeds as deploy's default
    print(f"\nsuccess over ROS 2 {summary['success_rate']:.2f} vs direct sim {direct['success_rate']:.2f}; "
          f"control {summary['control']}; latency p50/p99 {summary['latency_p50_ms']:.1f}/"
          f"{summary['latency_p99_ms']:.1f} ms")  # fmt: skip
    assert summary["episodes"] == EPISODES and summary["aborted_episodes"] == 0
    assert abs(summary["success_rate"] - direct["success_rate"]) <= 0.25
    assert summary["control"]["deadline_misses"] <= 0.05 * summary["control"]["cycles"]
    with EpisodeStore(tmp_path / "store") as store:
        assert len(store) == EPISODES
        assert [store.meta(i)["success"] for i in range(EPISODES)] == [r["success"] for r in summary["per_episode"]]
        ep = store.episode(0)
        assert ep["state"].shape[1:] == (13,) and ep["action"].shape[1:] == (4,) and not ep["intervened"].any()


def test_residual_checkpoint_deploys_with_its_base(checkpoint: Path, domain: int, tmp_path: Path) -> None:
    """A zero-initialised residual on the trained policy acts as that policy: deployed over ROS 2 it must do what
    the same residual checkpoint does inside `ResidualEnv` in-process, and the robot sees task-space actions."""
    cfg = TrainConfig(
        algo="residual", residual=ResidualConfig(base=str(checkpoint)), sac=SACConfig(zero_init_actor=True)
    )
    state_dim = ObsLayout.of_env(make_env(cfg.env)).state_dim
    agent = SAC(cfg.sac, state_dim + 4, 4)
    counters = {"env_steps": 0, "updates": 0, "episodes": 0, "wall_clock_s": 0.0}
    yaml = OmegaConf.to_yaml(OmegaConf.structured(cfg))
    residual = save_checkpoint(tmp_path / "residual", "final", agent, agent.optimizers(), counters, yaml)
    summary = deploy_against_sim_robot(residual, domain, tmp_path / "store")
    direct = evaluate_checkpoint(Checkpoint(residual), EPISODES)
    assert summary["episodes"] == EPISODES and summary["aborted_episodes"] == 0
    assert abs(summary["success_rate"] - direct["success_rate"]) <= 0.25 and direct["success_rate"] >= 0.5
    with EpisodeStore(tmp_path / "store") as store:
        ep = store.episode(0)  # the robot's own observation and the executed action, not the agent's view
        assert ep["state"].shape[1:] == (13,) and ep["action"].shape[1:] == (4,)


def test_robot_side_holds_within_a_control_period_when_the_policy_process_dies(checkpoint: Path, domain: int) -> None:
    """Timing from the robot's side: the sim robot's watchdog reports the gap it measured between the last command
    it received and the tick that held, and poses carry the robot's stamps. When this process receives them is
    not asserted on: on a loaded box the hold reached it 330-820 ms after the last command, while the robot had
    held after 210 ms (a full garbage collection stalled the robot's publishing, then this process's own
    scheduling)."""
    timeout, period = 0.2, 0.1  # robot-side command watchdog (2 periods: loaded CI boxes jitter); 10 Hz policy
    sim = spawn("sim-robot", "--domain", str(domain), "--command-timeout", str(timeout))
    tx = spy_transport(domain)
    cfg = load_robot_config("sim")
    cmds = tx.subscription(cfg.command_topic, msgs.POSE)
    status = tx.subscription(cfg.status_topic, msgs.STRING)
    poses = tx.subscription(cfg.ee_pose_topic, msgs.POSE, SENSOR_QOS)  # best effort, like the sim robot's writer
    dep = spawn("deploy", str(checkpoint), "--robot", "sim", "--domain", str(domain), "--episodes", "50", "--quiet",
                "--robot-set", "reset_timeout_s=60")  # fmt: skip
    cmd_stamps: list[float] = []
    tcp: list[tuple[float, np.ndarray]] = []  # (robot stamp, TCP)
    holds: list[str] = []

    def collect() -> None:
        cmd_stamps.extend(msgs.stamp_of(m) for m in cmds.take())
        tcp.extend((msgs.stamp_of(m), msgs.pose_of(m)[0]) for m in poses.take())
        holds.extend(m.data for m in status.take() if m.data.startswith("hold:"))

    def moving() -> bool:
        collect()
        recent = [p for t, p in tcp if t > tcp[-1][0] - 0.05] if tcp else []
        return len(cmd_stamps) >= 3 and len(recent) >= 2 and np.linalg.norm(recent[-1] - recent[0]) > 0.05 * 0.05

    try:
        wait_until(moving, 60, "the deployed policy to move the arm")
        assert not holds, f"the robot held while the policy was still running: {holds}"
        dep.send_signal(signal.SIGKILL)
        t_kill = time.time()
        wait_until(lambda: collect() or holds, 30, "the sim robot's hold")
        hold = re.fullmatch(r"hold: no_action: ([\d.]+)s > ([\d.]+)s", holds[0])
        assert hold and float(hold[2]) == timeout, holds[0]
        gap = float(hold[1])  # the robot's clock: last command received -> the tick that held
        t_last = cmd_stamps[-1]  # sent by deploy before it died (the host's clock, as the robot's stamps)
        t_hold = t_last + gap  # no later than the robot held: it received the last command after it was sent
        # A second of the robot's poses after it held, by its stamps: the poses received so far may all predate the
        # hold when the robot process stalled (one CI run: a 1009 ms gap, the newest pose from before it).
        wait_until(lambda: collect() or max(t for t, _ in tcp) > t_hold + 1.3, 30, "the robot's poses after the hold")
    finally:
        stop(dep, sim)
        tx.close()
    print(f"\nlast command -> hold on the robot: {1e3 * gap:.0f} ms (timeout {1e3 * timeout:.0f} ms)")
    assert t_last <= t_kill
    # The hold comes once the command deadline has passed, at the robot's first tick after it: within one control
    # period (10 ticks at 100 Hz), unless the robot process did not run at all then (one run on a loaded box reported
    # 3.014 s), which its poses show: none is stamped between that period's end and the hold.
    assert gap >= timeout
    late = [round(t - t_last, 3) for t, _ in tcp if t_last + timeout + period < t < t_hold]
    assert gap <= timeout + period or not late, f"the robot ticked past the deadline without holding, at {late[:5]}"
    # Held means still: after settling, the TCP stays put (no drift towards the last target or anywhere else).
    after = np.array([p for t, p in tcp if t > t_hold + 0.3])
    assert len(after) > 10 and np.ptp(after, axis=0).max() < 0.003
    at_hold = min(tcp, key=lambda tp: abs(tp[0] - t_hold))[1]
    assert np.linalg.norm(after[-1] - at_hold) < 0.03


def test_bad_inputs_never_put_a_command_outside_the_limits_on_the_wire(domain: int) -> None:
    sim = spawn("sim-robot", "--domain", str(domain))
    cfg = load_robot_config("sim", [f"domain_id={domain}", "backend=rclpy", "reset_timeout_s=60"])
    tx = spy_transport(domain)
    wire = tx.subscription(cfg.command_topic, msgs.POSE)
    grip = tx.subscription(cfg.gripper_topic, msgs.FLOAT64)
    ref = make_env(EnvConfig())
    env = RobotEnv(
        cfg,
        ObsLayout.from_slices(ref.unwrapped.state_layout, control_hz=10.0),
        max_episode_steps=10_000,
        node_name="bad_inputs",
    )
    ref.close()
    # (command target, TCP measured before the step); the env may use a TCP up to one state message newer.
    received: list[tuple[np.ndarray, np.ndarray]] = []
    grips: list[float] = []
    nan, inf = float("nan"), float("inf")
    bad = [[nan, 0, 0, 0], [0, inf, 0, -inf], [1e308, -1e308, 1e308, 1e308], [nan] * 4]
    pushes = [[0, 0, -1, -1]] * 12 + [[1, 1, 1, 1]] * 14 + [[-1, -1, 0, 0]] * 18 + [[1e6, 0, -1e6, 0]] * 4
    try:
        env.reset(seed=5)
        for a in bad + pushes + bad:
            state = env.robot_state()
            if env.step(np.array(a, dtype=np.float64))[4].get("safety_failure"):  # e.g. a joint near its limit in
                env.reset(seed=6)  # a workspace corner: the policy's stop ends the episode, reset to go on
            time.sleep(0.02)
            for m in wire.take():
                received.append((msgs.pose_of(m)[0], state.tcp_pos))
            grips.extend(float(m.data) for m in grip.take())
        # Stale state: the robot process hangs. The env must raise, and nothing may be commanded from old data.
        os.kill(sim.pid, signal.SIGSTOP)
        time.sleep(0.4)
        wire.take()
        with pytest.raises(StaleDataError):
            env.step(np.array([1.0, 0.0, 0.0, 0.0]))
        time.sleep(0.1)
        assert wire.take() == []
        os.kill(sim.pid, signal.SIGCONT)
        env.reset(seed=7)  # and it recovers once the robot is back
        env.step(np.zeros(4))
    finally:
        if sim.poll() is None:
            os.kill(sim.pid, signal.SIGCONT)
        env.close()
        tx.close()  # our nodes before the kill (docs/architecture.md)
        stop(sim)
    lo, hi = np.array(cfg.safety.workspace_lo), np.array(cfg.safety.workspace_hi)
    limit = min(cfg.safety.max_translation_step, cfg.safety.max_velocity * 0.1)
    assert len(received) >= len(bad) + len(pushes) - 5
    hits = {"lo": False, "hi": False}
    for target, tcp in received:
        assert np.isfinite(target).all()
        assert (target >= lo - 1e-9).all() and (target <= hi + 1e-9).all(), target
        assert np.linalg.norm(target - tcp) <= limit + 0.01
        hits["lo"] |= bool(np.isclose(target[2], lo[2]))
        hits["hi"] |= bool(np.isclose(target, hi).any())
    assert all(hits.values()), "the pushes should have driven commands onto the workspace boundary"
    assert grips and all(0.0 <= g <= 1.0 for g in grips)
