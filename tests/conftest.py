"""Fixtures shared across test packages."""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

# Every ROS 2 participant of the tests, in this process and in the ones it spawns, discovers on this host only.
os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"


def pytest_sessionstart(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):  # once, before the xdist workers start
        clean_dead_fastdds_shm()


def clean_dead_fastdds_shm(shm: Path = Path("/dev/shm")) -> None:
    """Removes the Fast DDS shared-memory ports and segments of dead processes, as `fastdds shm clean` does (its tool
    needs psutil): a live owner holds a lock on the `_el` file, and a port without one has no listener. Earlier runs'
    SIGKILLed processes leave hundreds, and a new participant that draws a dead one's port recreates it under peers
    that may still write to the old one."""
    for lock in shm.glob("fastdds_*_el"):
        try:
            with lock.open("ab") as f:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # its owner lives
        lock.unlink(missing_ok=True)
    for seg in shm.glob("fastdds_*"):
        if not seg.name.endswith("_el") and not (shm / f"{seg.name}_el").exists() and time.time() - _mtime(seg) > 60:
            seg.unlink(missing_ok=True)
            (shm / f"sem.{seg.name}_mutex").unlink(missing_ok=True)


def _mtime(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except FileNotFoundError:
        return time.time()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The order xdist deals modules out in: the shared ones, those with `slow` tests first so that no worker ends
    on a long one, then the `realtime` ones, which run one at a time (`_alone`) while no shared test is left to wait
    for. `gpu` tests run where CUDA is usable and are skipped, with the reason, elsewhere."""
    import torch

    slow = {item.module for item in items if "slow" in item.keywords}
    items.sort(key=lambda item: ("realtime" in item.keywords, item.module not in slow))  # stable within a group
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason=f"needs CUDA (torch {torch.__version__}: no usable GPU)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def _shared_dir(basetemp: str | Path) -> Path | None:
    """The folder all xdist workers of this run share, or None outside xdist: xdist gives each worker the basetemp
    <the run's basetemp>/<worker name>."""
    return Path(basetemp).parent if "PYTEST_XDIST_WORKER" in os.environ else None


_FDS: dict[str, int] = {}  # lock name -> this worker's descriptor of its file
_ALONE: set = set()  # the realtime module this worker runs alone, while it runs


def _flock(shared: Path, name: str, mode: int) -> None:
    if name not in _FDS:
        _FDS[name] = os.open(shared / f"{name}.lock", os.O_CREAT | os.O_RDWR)
    fcntl.flock(_FDS[name], mode)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Under xdist tests share the box, except a `realtime` module's fixtures, tests and teardown, which run with no
    test beside them (`_alone`): its robot keeps a wall clock that a busy neighbour starves on a 2-core box (a 0.25 s
    command watchdog tripped at 0.94 s). The turnstile lets a waiting realtime module in before the next test."""
    shared = _shared_dir(item.config.option.basetemp or ".")
    if shared is None:
        yield
        return
    if item.module not in _ALONE:
        _flock(shared, "turnstile", fcntl.LOCK_EX)
        _flock(shared, "cpu", fcntl.LOCK_SH)
        _flock(shared, "turnstile", fcntl.LOCK_UN)
    yield
    if item.module not in _ALONE:
        _flock(shared, "cpu", fcntl.LOCK_UN)
    elif nextitem is None or nextitem.module is not item.module:
        _flock(shared, "cpu", fcntl.LOCK_UN)
        _flock(shared, "turnstile", fcntl.LOCK_UN)
        _ALONE.clear()


@pytest.fixture(scope="module", autouse=True)
def _alone(request: pytest.FixtureRequest) -> None:
    """A realtime module takes the box for itself once the session's fixtures (training runs, which need no clock)
    are made: autouse, it comes after them and before the module's own fixtures."""
    shared = _shared_dir(request.config.option.basetemp or ".")
    if shared is None or request.node.get_closest_marker("realtime") is None:
        return
    _flock(shared, "cpu", fcntl.LOCK_UN)  # first, or two modules upgrading at once would wait on each other
    _flock(shared, "turnstile", fcntl.LOCK_EX)
    _flock(shared, "cpu", fcntl.LOCK_EX)
    _ALONE.add(request.module)


@pytest.fixture
def domain() -> int:
    from plain_ros import random_domain  # rclpy only once the discovery range above is set

    return random_domain()


def _trained_once(tmp_path_factory: pytest.TempPathFactory, name: str, overrides: list[str]) -> Path:
    """A training run made once per test session: under xdist the first worker to need it trains, the other waits
    for it and reuses it."""
    from robot_rl.config import load_config
    from robot_rl.loop.trainer import train

    shared = _shared_dir(tmp_path_factory.getbasetemp()) or tmp_path_factory.getbasetemp()
    run = shared / name
    _flock(shared, name, fcntl.LOCK_EX)
    try:
        if not (run / "summary.json").exists():  # the last thing a run writes
            train(load_config([f"run_dir={run}", "profile=cpu", *overrides]))
    finally:
        _flock(shared, name, fcntl.LOCK_UN)
    return run


@pytest.fixture(scope="session")
def pickcube_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One short PickCube training run (~40 s on 2 cores) shared by the learning test and the deployment
    tests; ROBOT_RL_TEST_RUN=<run dir> reuses an earlier one while iterating."""
    if given := os.environ.get("ROBOT_RL_TEST_RUN"):
        return Path(given)
    return _trained_once(tmp_path_factory, "pickcube_run", ["loop.env_steps=2500", "loop.eval_every=500",
                         "loop.eval_episodes=10", "loop.stop_at_success=0.9", "loop.final_eval_episodes=20",
                         "loop.checkpoint_every=0"])  # fmt: skip


@pytest.fixture(scope="session")
def camera_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A PickCube camera policy trained in the sim for the sim robot (`obs=pixels env.for_robot=sim`: the robot's
    proprio and cameras, no object pose; ~75 s on 2 cores), for the sim-to-robot tests; ROBOT_RL_TEST_CAMERA_RUN=<run
    dir> reuses an earlier one while iterating. Its frames are standardised, as the visual preset's are: a robot run
    started from it must take that from the checkpoint (`init_from`), which its config does not say."""
    if given := os.environ.get("ROBOT_RL_TEST_CAMERA_RUN"):
        return Path(given)
    return _trained_once(tmp_path_factory, "camera_run", ["obs=pixels", "env.for_robot=sim",
                         "sac.normalize_frames=true", "loop.env_steps=5000", "loop.eval_every=500",
                         "loop.eval_episodes=10", "loop.stop_at_success=0.95", "loop.final_eval_episodes=10",
                         "loop.checkpoint_every=0"])  # fmt: skip
