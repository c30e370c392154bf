"""`robot-rl launch`: one learner and N actors as separate processes on this machine, supervised.

A dead actor is restarted (it rejoins as a new stream); a learner that dies abnormally is restarted with
`resume=` from its last checkpoint while the actors keep acting; a learner that finishes ends the launch. Ctrl-C
stops the learner first (it saves a checkpoint and an "interrupted" summary), then the rest.
On the Zenoh plane (the default) the learner listens on a free loopback port unless `distributed.zenoh.endpoint`
is given. For several machines run `robot-rl learner` and `robot-rl actor --index i` yourself, the actors given the
learner's endpoint and run id (`distributed.plane=ros2`: on one ROS domain).
With `robot=<name>` each robot cell gets one actor: the one arm on `robot.domain_id`, or one per domain in
`distributed.cell_domains` (`distributed.n_actors` is set to their number); `distributed.standins=true` also serves
each cell's sim robot, supervised like the nodes.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from robot_rl.config import TrainConfig
from robot_rl.errors import UserError
from robot_rl.nodes.links import with_run_id
from robot_rl.transport.base import PlaneConfig

log = logging.getLogger("robot_rl.launch")
DEFAULT_ENDPOINT = PlaneConfig().endpoint


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "robot_rl.cli", *args]


def launch(cfg: TrainConfig, overrides: list[str], max_restarts: int = 20) -> int:
    if not cfg.resume and not cfg.run_dir:
        raise ValueError("launch needs run_dir= (a learner restart resumes from it)")
    dist = cfg.distributed
    cells = dist.cell_domains or ([cfg.robot.domain_id] if cfg.robot is not None else [])
    if cells and dist.n_actors != len(cells):
        log.info("robot=%s: one actor per arm (distributed.n_actors=%d)", cfg.robot.name, len(cells))
        overrides = [*(o for o in overrides if not o.startswith("distributed.n_actors=")),
                     f"distributed.n_actors={len(cells)}"]  # fmt: skip
        dist = dataclasses.replace(dist, n_actors=len(cells))
        cfg = dataclasses.replace(cfg, distributed=dist)
    env = dict(os.environ)
    if dist.local:
        env.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")  # all on this machine: discovery stays here
    run_dir = Path(cfg.resume or cfg.run_dir)
    if dist.plane == "zenoh" and dist.local and dist.zenoh.endpoint == DEFAULT_ENDPOINT:  # launches side by side
        overrides = [*overrides, f"distributed.zenoh.endpoint=tcp/127.0.0.1:{_free_port()}"]
    arms = {f"stand-in {d}": d for d in cells} if dist.standins else {}
    starts = {name: standin_args(cfg, d) for name, d in arms.items()} | _node_commands(cfg, overrides, cells)
    procs: dict[str, subprocess.Popen] = {}
    try:
        for name, args in starts.items():  # the stand-ins first, each serving before the nodes start
            procs[name] = subprocess.Popen(_cli(*args), env=env)
            if name in arms:
                wait_for_arm(cfg, arms[name], procs[name])
        starts["learner"] = ["learner", f"resume={run_dir}"]  # a learner that dies resumes from its checkpoint
        return _supervise(procs, starts, env, run_dir, max_restarts)
    except KeyboardInterrupt:  # a terminal's Ctrl-C reached the learner too: it is saving (learner_node)
        _wait(procs.get("learner"), 5.0)
        raise
    finally:
        _stop(procs)


def _stop(procs: dict[str, subprocess.Popen]) -> None:
    """The learner first, by SIGINT, as Ctrl-C stops it (it saves its checkpoint and summary), then the rest."""
    learner = procs.get("learner")
    if learner is not None and learner.poll() is None:
        learner.send_signal(signal.SIGINT)
        _wait(learner, 120.0)
    for p in procs.values():
        if p.poll() is None:
            p.terminate()
    for p in procs.values():
        if not _wait(p, 10.0):
            p.kill()


def _wait(p: subprocess.Popen | None, timeout_s: float) -> bool:
    """Whether `p` (None: nothing) has ended within `timeout_s`."""
    try:
        return p is None or p.wait(timeout=timeout_s) is not None
    except subprocess.TimeoutExpired:
        return False


def _free_port() -> int:
    """A loopback port nothing listens on now: the learner of this launch listens there."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _node_commands(cfg: TrainConfig, overrides: list[str], cells: list[int]) -> dict[str, list[str]]:
    learner = ["learner", *overrides]
    if cfg.distributed.plane == "zenoh":  # the actors key their data by the learner's run id
        overrides = [*overrides, f"distributed.zenoh.run_id={with_run_id(cfg).distributed.zenoh.run_id}"]
    arm = [[f"robot.domain_id={d}"] for d in cells] or [[]] * cfg.distributed.n_actors  # each actor's ROS graph
    actors = {f"actor {i}": ["actor", "--index", str(i), *overrides, *arm[i]] for i in range(cfg.distributed.n_actors)}
    return {"learner": learner, **actors}


def _supervise(procs: dict[str, subprocess.Popen], starts: dict[str, list[str]], env: dict, run_dir: Path,
               max_restarts: int) -> int:  # fmt: skip
    """Restarts what dies until the learner ends the run: actors that exit 0 were told the run is over."""
    restarts = 0
    while True:
        rc = procs["learner"].poll()
        if rc == 0:
            return 0
        if rc is not None and not (run_dir / "checkpoints" / "latest").exists():
            log.error("learner exited with %s and cannot be resumed", rc)
            return rc
        for name, p in procs.items():
            if p.poll() in (None, 0):
                continue
            if restarts >= max_restarts:
                log.error("%s exited with %s after %d restarts: giving up", name, p.returncode, restarts)
                return p.returncode or 1
            restarts += 1
            log.warning("%s exited with %s: restarting (restart %d)", name, p.returncode, restarts)
            procs[name] = subprocess.Popen(_cli(*starts[name]), env=env)
        time.sleep(0.2)


def standin_args(cfg: TrainConfig, domain: int) -> list[str]:
    """`robot-rl sim-robot` serving the run's robot config and task on `domain`, with the cameras the policy reads."""
    args = ["sim-robot", "--robot", cfg.robot.name, "--domain", str(domain), "--task", cfg.env.task,
            "--seed", str(cfg.seed + domain)]  # fmt: skip
    if cfg.robot.lockstep:
        args.append("--lockstep")
    if cfg.env.obs != "state":
        args += ["--cameras", ",".join(cfg.env.cameras), "--image-size", str(cfg.env.image_size),
                 "--camera-hz", str(cfg.env.control_hz)]  # fmt: skip
    return args


def wait_for_arm(cfg: TrainConfig, domain: int, standin: subprocess.Popen, timeout_s: float = 120.0) -> None:
    """Until the stand-in on `domain` listens for commands (a lockstep arm publishes nothing before the first): an
    actor started before its arm fails its first reset and waits out a restart while the other cells train."""
    from robot_rl.real import msgs
    from robot_rl.real.robot import COMMAND_QOS
    from robot_rl.transport import TransportConfig, make_transport

    robot = cfg.robot
    tc = TransportConfig(backend=robot.backend, domain_id=domain, namespace=robot.namespace, node_name="launch")
    deadline = time.monotonic() + timeout_s
    with make_transport(tc) as tx:
        command = tx.publisher(robot.command_topic, msgs.COMMAND[robot.command_type], COMMAND_QOS)
        while not command.matched():
            if standin.poll() is not None or time.monotonic() > deadline:
                raise UserError(f"the stand-in on domain {domain} took no {robot.command_topic} commands (exit code "
                                f"{standin.poll()}, waited up to {timeout_s:g} s; its log is above)")  # fmt: skip
            time.sleep(0.1)
