"""Fixtures shared across test packages."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Every ROS 2 participant of the tests, in this process and in the ones it spawns, discovers on this host only.
os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`gpu` tests run where CUDA is usable and are skipped, with the reason, elsewhere."""
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason=f"needs CUDA (torch {torch.__version__}: no usable GPU)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def domain() -> int:
    from plain_ros import random_domain  # rclpy only once the discovery range above is set

    return random_domain()


@pytest.fixture(scope="session")
def pickcube_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One short PickCube training run (~40 s on 2 cores) shared by the learning test and the deployment
    tests; ROBOT_RL_TEST_RUN=<run dir> reuses an earlier one while iterating."""
    if given := os.environ.get("ROBOT_RL_TEST_RUN"):
        return Path(given)
    from robot_rl.config import load_config
    from robot_rl.loop.trainer import train

    run = tmp_path_factory.mktemp("pickcube_run")
    train(load_config([f"run_dir={run}", "loop.env_steps=2500", "loop.eval_every=500", "loop.eval_episodes=10",
                       "loop.stop_at_success=0.9", "loop.final_eval_episodes=20", "loop.checkpoint_every=0",
                       "profile=cpu"]))  # fmt: skip
    return run


@pytest.fixture(scope="session")
def camera_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A PickCube camera policy trained in the sim for the sim robot (`obs=pixels env.for_robot=sim`: the robot's
    proprio and cameras, no object pose; ~75 s on 2 cores), for the sim-to-robot tests; ROBOT_RL_TEST_CAMERA_RUN=<run
    dir> reuses an earlier one while iterating."""
    if given := os.environ.get("ROBOT_RL_TEST_CAMERA_RUN"):
        return Path(given)
    from robot_rl.config import load_config
    from robot_rl.loop.trainer import train

    run = tmp_path_factory.mktemp("camera_run")
    train(load_config([f"run_dir={run}", "obs=pixels", "env.for_robot=sim", "loop.env_steps=5000",
                       "loop.eval_every=500", "loop.eval_episodes=10", "loop.stop_at_success=0.95",
                       "loop.final_eval_episodes=10", "loop.checkpoint_every=0", "profile=cpu"]))  # fmt: skip
    return run
