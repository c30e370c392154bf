"""Learner and actor nodes as real processes over ROS 2 (rclpy, this host only)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from plain_ros import free_port, host_address, make_ca

from robot_rl.config import load_config
from robot_rl.transport import TransitionReceiver, TransportConfig, make_transport
from robot_rl.transport import plane as zenoh_plane_module
from robot_rl.transport.channels import EPISODE_QOS, EPISODE_T, EPISODES_TOPIC

pytestmark = pytest.mark.slow


def common(domain: int, steps: int) -> list[str]:
    return [f"distributed.transport.domain_id={domain}", "distributed.transport.backend=rclpy",
            f"loop.env_steps={steps}", "loop.eval_every=0", "loop.final_eval_episodes=3", "demos.n_episodes=5",
            "loop.checkpoint_every=100", "loop.stop_at_success=2", "profile=cpu", "threads=1"]  # fmt: skip


def spawn(*args: str) -> subprocess.Popen:
    env = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}
    return subprocess.Popen([sys.executable, "-m", "robot_rl.cli", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip


def finish(p: subprocess.Popen, timeout: float) -> str:
    out, _ = p.communicate(timeout=timeout)
    assert p.returncode == 0, out[-3000:]
    return out


def stop(*procs: subprocess.Popen) -> None:
    """Kills what still runs and prints the end of its output: a failed test shows where each process was."""
    for p in procs:
        if p.poll() is None:
            p.kill()
            out, _ = p.communicate()
            print(f"--- killed: {' '.join(p.args[3:6])}\n{out[-2000:]}")


def wait_for(pred, timeout_s: float) -> None:
    deadline = time.time() + timeout_s
    while not pred():
        assert time.time() < deadline, "timed out"
        time.sleep(0.2)


def test_learner_and_actor_processes_train_over_ros2(tmp_path: Path, domain: int) -> None:
    run = tmp_path / "run"
    learner = spawn("learner", f"run_dir={run}", *common(domain, 300), *ROS2_PLANE)
    actor = spawn("actor", "--index", "0", *common(domain, 300), *ROS2_PLANE)
    try:
        finish(learner, 240)
    finally:
        stop(actor)
    s = json.loads((run / "summary.json").read_text())
    assert s["env_steps"] == 300 and s["updates"] == 300  # the UTD rate limit held across processes
    ((actor_id, st),) = s["actors"].items()
    assert actor_id.startswith("actor0-") and st["lost"] == 0 and st["transitions"] >= 300


# From the kill on no other actor runs, so the restart is heard whatever the load (a 2000-step race against a
# surviving actor was lost twice on a loaded box).
STEPS_KILLED = 1000


def checkpoint_step(run: Path) -> int:
    """The env step of the run's latest checkpoint (0 before the first)."""
    latest = run / "checkpoints" / "latest"
    return int(latest.read_text().removeprefix("step_")) if latest.exists() else 0


ROS2_PLANE = ["distributed.plane=ros2"]  # the old plane, named (the nodes default to Zenoh)


def zenoh_plane(run_id: str = "") -> list[str]:
    """Overrides that put the nodes' data on the Zenoh plane, on a free loopback port ("": the learner's run id)."""
    return ["distributed.plane=zenoh", f"distributed.zenoh.endpoint=tcp/127.0.0.1:{free_port()}",
            *([f"distributed.zenoh.run_id={run_id}"] if run_id else [])]  # fmt: skip


@contextmanager
def episodes_heard(domain: int, plane: list[str]) -> Iterator[Callable[[], list[str]]]:
    """The actor names ("actor0") of episodes reported since the last call, heard beside the learner: on DDS from
    now (open it before any actor can publish), on Zenoh once the learner listens."""
    if plane == ROS2_PLANE:
        cfg = TransportConfig(backend="rclpy", domain_id=domain, task="PickCube", node_name="probe")
        with make_transport(cfg) as probe:
            sub = probe.subscription(EPISODES_TOPIC, EPISODE_T, EPISODE_QOS)
            yield lambda: [e.actor_id.split("-")[0] for e in sub.take()]
        return
    pc = load_config(plane).distributed.zenoh
    session: list = []

    def take() -> list[str]:
        if not session:
            with contextlib.suppress(ConnectionError):
                peer = zenoh_plane_module.open_session(pc, "actor", "probe")
                session.append((peer, zenoh_plane_module.Episodes(peer.session, pc)))
            return []
        return [e["actor_id"].split("-")[0] for e in session[0][1].take()]

    try:
        yield take
    finally:
        if session:
            session[0][0].close()


def test_actors_killed_mid_episode_one_rejoins_and_the_waiting_learner_trains_on_its_data(
    tmp_path: Path, domain: int
) -> None:
    """Both actors SIGKILLed mid-episode, one restarted: the learner, waiting for data, trains two checkpoints on
    the restart's data and finishes. On the Zenoh plane: on the ros2 plane a restart can stay deaf to its waiting
    learner (Fast DDS shared-memory ports, docs/architecture.md)."""
    run = tmp_path / "run"
    on = zenoh_plane("killed")
    args = [*common(domain, STEPS_KILLED), *on]
    with episodes_heard(domain, on) as heard:
        learner = spawn("learner", f"run_dir={run}", *args)
        a0 = spawn("actor", "--index", "0", *args)
        a1 = spawn("actor", "--index", "1", *args)
        a0_again, ended = None, set()

        def both_acting() -> bool:
            """An episode from each actor (its steps were flushed with it) and a checkpoint: a1 is in the run
            before it is killed, however slowly it started."""
            ended.update(heard())
            return ended >= {"actor0", "actor1"} and checkpoint_step(run) > 0

        try:
            wait_for(both_acting, 180)  # training is under way
            for a in (a1, a0):
                a.send_signal(signal.SIGKILL)
                a.wait()
            at_kill = checkpoint_step(run)
            a0_again = spawn("actor", "--index", "0", *args)
            wait_for(lambda: checkpoint_step(run) >= at_kill + 200, 180)  # two checkpoints on the restart's data
            finish(learner, 240)
        finally:
            stop(a0, a1, *([a0_again] if a0_again else []), learner)  # a failed wait leaves no learner behind
    s = json.loads((run / "summary.json").read_text())
    assert s["env_steps"] == STEPS_KILLED
    names = sorted(a.split("-")[0] for a in s["actors"])
    assert names == ["actor0", "actor0", "actor1"]  # the killed actors and the restart
    assert all(v["lost"] == 0 for v in s["actors"].values())  # nothing an actor sent was dropped


@pytest.mark.parametrize("bind", ["loopback", "host"])
def test_peers_without_the_runs_certificates_never_reach_it(tmp_path: Path, domain: int, bind: str) -> None:
    """TLS through the nodes: the learner and one actor hold certificates of the run's CA. An actor with another
    CA's certificate never reaches the learner, and an actor of the run never takes weights from an impostor
    learner (the same run id, another CA's certificate); both keep dialling and say why they get no link. The run
    trains on its one actor. Also with the learners on this host's network address, as on a GPU box."""
    ip = "127.0.0.1" if bind == "loopback" else host_address()
    if ip is None:
        pytest.skip("this host has no address but loopback")
    ours, theirs = f"tls/{ip}:{free_port()}", f"tls/{ip}:{free_port()}"
    tls = {name: [f"distributed.zenoh.tls.{k}={v}" for k, v in make_ca(tmp_path, name, ip).items()]
           for name in ("run", "stranger")}  # fmt: skip

    def node(role: str, endpoint: str, ca: str, *more: str) -> subprocess.Popen:
        return spawn(role, *more, *common(domain, 300), f"distributed.zenoh.endpoint={endpoint}", *tls[ca])

    learner = node("learner", ours, "run", f"run_dir={tmp_path / 'ours' / 'run'}")
    impostor = node("learner", theirs, "stranger", f"run_dir={tmp_path / 'theirs' / 'run'}")
    actor, stranger, deceived = (node("actor", endpoint, ca, "--index", str(i), "distributed.zenoh.run_id=run")
                                 for i, (endpoint, ca) in enumerate(((ours, "run"), (ours, "stranger"),
                                                                     (theirs, "run"))))  # fmt: skip
    try:
        finish(learner, 240)
    finally:
        stop(learner, actor)
        for p in (impostor, stranger, deceived):
            p.kill()
    for p, endpoint in ((stranger, ours), (deceived, theirs)):
        out = p.communicate()[0]
        assert f"waiting for a learner at {endpoint}" in out and "TLS refused" in out, out[-2000:]
    s = json.loads((tmp_path / "ours" / "run" / "summary.json").read_text())
    assert [a.split("-")[0] for a in s["actors"]] == ["actor0"] and s["env_steps"] == 300
    assert not (tmp_path / "theirs" / "run" / "checkpoints").exists()  # the impostor got no steps to train on


def test_launch_on_the_zenoh_plane_keys_the_run_and_loses_nothing(tmp_path: Path, domain: int) -> None:
    """Launch with the defaults: the Zenoh plane, the learner on a free loopback port (launches side by side never
    share one), two actors dialling it until it listens; the run id is the run dir's name, saved in its config with
    the endpoint (a resume keeps both) and passed to the actors."""
    run = tmp_path / "zenoh-run"
    launch = spawn("launch", f"run_dir={run}", "distributed.n_actors=2", *common(domain, 300))
    try:
        out = finish(launch, 300)
    finally:
        stop(launch)
    s = json.loads((run / "summary.json").read_text())
    assert s["env_steps"] == 300 and len(s["actors"]) == 2, out[-2000:]
    assert all(a["lost"] == 0 for a in s["actors"].values())
    saved = OmegaConf.load(run / "config.yaml").distributed  # what a resume loads
    assert saved.zenoh.run_id == "zenoh-run" and saved.zenoh.endpoint != "tcp/127.0.0.1:7448"
    assert "run id zenoh-run" in out


def test_two_learner_ranks_each_take_their_actors_shard_and_train_as_one(tmp_path: Path, domain: int) -> None:
    """`distributed.learners=2`: the learner starts rank 1 itself (gloo on this CPU), actor 0 feeds rank 0 and
    actor 1 rank 1, and the fleet's steps count once: the run stops at its budget at the UTD, both actors' counts in
    its summary, nothing lost."""
    run = tmp_path / "ranks"
    launch = spawn("launch", f"run_dir={run}", "distributed.n_actors=2", "distributed.learners=2",
                   *common(domain, 300))  # fmt: skip
    try:
        out = finish(launch, 300)
    finally:
        stop(launch)
    s = json.loads((run / "summary.json").read_text())
    assert s["env_steps"] == 300 and s["replay_ratio"] == load_config([]).sac.utd, out[-2000:]
    assert sorted(a.split("-")[0] for a in s["actors"]) == ["actor0", "actor1"], s["actors"]
    assert all(a["transitions"] > 0 and a["lost"] == 0 for a in s["actors"].values())
    steps = sorted(c.name for c in (run / "checkpoints").glob("step_*"))  # rank 1 saves its shard at the lead's
    assert steps and sorted(c.name for c in (run / "rank1" / "checkpoints").glob("step_*")) == steps


def ranks_of(run: Path) -> dict[int, int]:
    """pid by learner rank of the run's learner processes (rank 0: the one without RANK, or RANK=0)."""
    out = subprocess.run(["pgrep", "-f", f"robot_rl.cli learner .*{run}"], capture_output=True, text=True).stdout
    found = {}
    for pid in map(int, out.split()):
        with contextlib.suppress(OSError):
            env = dict(e.split("=", 1) for e in Path(f"/proc/{pid}/environ").read_text().split("\0") if "=" in e)
            found[int(env.get("RANK", 0))] = pid
    return found


def test_a_killed_learner_rank_takes_the_run_back_to_its_checkpoint_and_it_finishes(
    tmp_path: Path, domain: int
) -> None:
    """SIGKILL rank 1 mid-run: the lead's collective breaks, it exits, launch resumes it from its checkpoint with a
    new rank 1 that resumes its shard from its own, and the run finishes its budget with both actors' data and
    nothing lost."""
    run = tmp_path / "ranks"
    launch = spawn("launch", f"run_dir={run}", "distributed.n_actors=2", "distributed.learners=2",
                   *common(domain, 600))  # fmt: skip
    try:
        wait_for(lambda: checkpoint_step(run) >= 100 and 1 in ranks_of(run), 240)
        first = ranks_of(run)
        os.kill(first[1], signal.SIGKILL)
        out = finish(launch, 400)
    finally:
        stop(launch)
    s = json.loads((run / "summary.json").read_text())
    assert s["env_steps"] == 600 and "learner exited with" in out, out[-3000:]
    assert f"resumed {run / 'rank1'} from step_" in out  # the new rank 1 has its shard back
    assert sorted(a.split("-")[0] for a in s["actors"]) == ["actor0", "actor1"], s["actors"]
    assert all(a["lost"] == 0 for a in s["actors"].values())


def test_ctrl_c_on_launch_saves_the_learners_run_with_each_actors_count(tmp_path: Path, domain: int) -> None:
    """Ctrl-C in launch's terminal reaches its whole process group: the learner saves a step checkpoint and an
    "interrupted" summary with each actor's transitions (as `train` does), and launch leaves no process behind."""
    run = tmp_path / "run"
    launch = subprocess.Popen([sys.executable, "-m", "robot_rl.cli", "launch", f"run_dir={run}",
                               "distributed.n_actors=2", *common(domain, 100_000)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True)  # fmt: skip
    try:
        wait_for(lambda: checkpoint_step(run) >= 100, 180)
        os.killpg(launch.pid, signal.SIGINT)
        out, _ = launch.communicate(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(launch.pid, signal.SIGKILL)
        stop(launch)
    assert launch.returncode == 130, out[-3000:]
    s = json.loads((run / "summary.json").read_text())
    assert s["status"] == "interrupted" and checkpoint_step(run) == s["env_steps"] > 100, out[-3000:]
    assert len(s["actors"]) == 2 and all(a["transitions"] > 0 and a["lost"] == 0 for a in s["actors"].values())
    assert not subprocess.run(["pgrep", "-f", f"run_dir={run}"], capture_output=True).stdout


@contextmanager
def listening_as_learner(domain: int, plane: list[str]) -> Iterator[Callable[[float], list]]:
    """`poll(timeout_s)` of transitions taken where the learner takes them (on Zenoh: its endpoint, free since it
    was killed; the actor's session reconnects there)."""
    if plane == ROS2_PLANE:
        cfg = TransportConfig(backend="rclpy", domain_id=domain, task="PickCube", node_name="probe")
        with make_transport(cfg) as transport:
            yield TransitionReceiver(transport).poll
        return
    pc = load_config(plane).distributed.zenoh
    peer = zenoh_plane_module.open_session(pc, "learner", "probe")
    try:
        yield zenoh_plane_module.Receiver(peer.session, pc, "PickCube").poll
    finally:
        peer.close()


@pytest.mark.parametrize("plane", ["ros2", "zenoh"])
def test_learner_killed_actors_keep_acting_and_learner_resumes(tmp_path: Path, domain: int, plane: str) -> None:
    run = tmp_path / "run"
    on = zenoh_plane("resumed") if plane == "zenoh" else ROS2_PLANE
    learner = spawn("learner", f"run_dir={run}", *common(domain, 500), *on)
    actor = spawn("actor", "--index", "0", *common(domain, 500), *on, "distributed.learner_timeout_s=0.5")
    resumed = None
    try:
        wait_for(lambda: (run / "checkpoints" / "latest").exists(), 180)
        learner.send_signal(signal.SIGKILL)
        learner.wait()
        killed_at = json.loads((run / "checkpoints" / (run / "checkpoints/latest").read_text() / "counters.json")
                               .read_text())  # fmt: skip
        # Listen as a learner would: the actor keeps acting and streaming with its last weights.
        with listening_as_learner(domain, on) as poll:
            got: list = []
            wait_for(lambda: got.extend(poll(0.1)) or len(got) >= 50, 60)
        assert actor.poll() is None
        resumed = spawn("learner", f"resume={run}")
        out = finish(resumed, 240)
    finally:
        stop(learner, actor, *([resumed] if resumed else []))
    assert f"resumed {run} from" in out
    s = json.loads((run / "summary.json").read_text())
    assert s["env_steps"] == 500 and killed_at["env_steps"] < 500
    assert any(a.startswith("actor0-") for a in s["actors"])  # the same actor reconnected to the new learner
    assert all(a["lost"] == 0 for a in s["actors"].values())  # counted from the first batch the new learner got


@pytest.mark.ros2
def test_launch_nodes_are_plain_ros2_nodes_and_lose_nothing(tmp_path: Path, domain: int) -> None:
    """`robot-rl launch` as a user runs it; a plain rclpy node (none of our transport code) lists the learner and
    the actors with their endpoints while it trains."""
    from plain_ros import PlainNode

    run = tmp_path / "run"
    launch = spawn("launch", f"run_dir={run}", "distributed.n_actors=2", *common(domain, 400), *ROS2_PLANE)
    try:
        with PlainNode(domain) as peer:

            def listed() -> bool:
                names = peer.node.get_node_names_and_namespaces()
                if not {("learner", "/robot_rl"), ("actor0", "/robot_rl"), ("actor1", "/robot_rl")} <= set(names):
                    return False
                learner_pubs, learner_subs = peer.node_endpoints("learner", "/robot_rl")
                actor_pubs, actor_subs = peer.node_endpoints("actor0", "/robot_rl")
                return ({"/robot_rl/weights/chunks", "/robot_rl/transitions/endpoint"} <= learner_pubs.keys()
                        and "/robot_rl/episodes" in learner_subs and "/robot_rl/episodes" in actor_pubs
                        and "/robot_rl/weights/chunks" in actor_subs)  # fmt: skip

            peer.spin_until(listed, 120, "learner and actors listed with their endpoints")
        out = finish(launch, 300)
    finally:
        stop(launch)
    s = json.loads((run / "summary.json").read_text())
    assert s["env_steps"] == 400 and len(s["actors"]) == 2, out[-2000:]
    assert all(a["lost"] == 0 for a in s["actors"].values())
    assert "connection lost" not in out, out[-2000:]  # a normal end is not reported as a failure
