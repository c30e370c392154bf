"""`robot-rl launch`: one learner and N actors as separate processes on this machine, supervised.

A dead actor is restarted (it rejoins as a new stream); a learner that dies abnormally is restarted with
`resume=` from its last checkpoint while the actors keep acting; a learner that finishes ends the launch.
For several machines run `robot-rl learner` and `robot-rl actor --index i` yourself on the same ROS domain (or,
with `distributed.plane=zenoh`, given the learner's endpoint and run id).
With `robot=<name>` each robot cell gets one actor: the one arm on `robot.domain_id`, or one per domain in
`distributed.cell_domains` (`distributed.n_actors` is set to their number).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

from robot_rl.config import TrainConfig
from robot_rl.nodes.links import with_run_id

log = logging.getLogger("robot_rl.launch")


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "robot_rl.cli", *args]


def launch(cfg: TrainConfig, overrides: list[str], max_restarts: int = 20) -> int:
    cells = cfg.distributed.cell_domains or ([cfg.robot.domain_id] if cfg.robot is not None else [])
    if cells and cfg.distributed.n_actors != len(cells):
        log.info("robot=%s: one actor per arm (distributed.n_actors=%d)", cfg.robot.name, len(cells))
        overrides = [*(o for o in overrides if not o.startswith("distributed.n_actors=")),
                     f"distributed.n_actors={len(cells)}"]  # fmt: skip
        cfg = dataclasses.replace(cfg, distributed=dataclasses.replace(cfg.distributed, n_actors=len(cells)))
    env = dict(os.environ)
    if cfg.distributed.local:
        env.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")  # all on this machine: discovery stays here
    run_dir = Path(cfg.resume or cfg.run_dir)
    learner_args = [*overrides]
    if not cfg.resume and not cfg.run_dir:
        raise ValueError("launch needs run_dir= (a learner restart resumes from it)")
    if cfg.distributed.plane == "zenoh":  # the actors key their data by the learner's run id
        overrides = [*overrides, f"distributed.zenoh.run_id={with_run_id(cfg).distributed.zenoh.run_id}"]
    learner = subprocess.Popen(_cli("learner", *learner_args), env=env)

    def actor(i: int) -> subprocess.Popen:
        cell = [f"robot.domain_id={cells[i]}"] if cells else []  # its arm's ROS graph
        return subprocess.Popen(_cli("actor", "--index", str(i), *overrides, *cell), env=env)

    actors = {i: actor(i) for i in range(cfg.distributed.n_actors)}
    restarts = 0
    try:
        while True:
            rc = learner.poll()
            if rc == 0:
                return 0
            if rc is not None:
                if restarts >= max_restarts or not (run_dir / "checkpoints" / "latest").exists():
                    log.error("learner exited with %s and cannot be resumed", rc)
                    return rc or 1
                restarts += 1
                log.warning("learner exited with %s: resuming from %s (restart %d)", rc, run_dir, restarts)
                learner = subprocess.Popen(_cli("learner", f"resume={run_dir}"), env=env)
            for i, p in actors.items():
                if p.poll() not in (None, 0) and restarts < max_restarts:  # 0: the learner ended the run
                    restarts += 1
                    log.warning("actor %d exited with %s: restarting", i, p.returncode)
                    actors[i] = actor(i)
            time.sleep(0.2)
    finally:
        for p in [*actors.values(), learner]:
            if p.poll() is None:
                p.terminate()
        for p in [*actors.values(), learner]:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
