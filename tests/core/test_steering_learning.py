"""From a weak diffusion base (few demos, short BC), residual RL and DSRL must each raise PickCube success.

Base and RL runs evaluate on the same episode seeds (seed 0), so the gain is measured on identical scenes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from robot_rl.cli import load_config
from robot_rl.loop.bc import train_bc
from robot_rl.loop.trainer import train

pytestmark = pytest.mark.slow
EVAL = ["loop.final_eval_episodes=30", "loop.eval_episodes=10", "loop.checkpoint_every=0", "threads=1"]


@pytest.fixture(scope="module")
def weak_base(tmp_path_factory: pytest.TempPathFactory) -> dict:
    run = tmp_path_factory.mktemp("bc_base")
    cfg = load_config(["algo=bc_diffusion", f"run_dir={run}", "demos.n_episodes=20", "demos.expert_noise=0.5",
                       "bc.steps=1000", "bc.eval_every=0", *EVAL])  # fmt: skip
    summary = json.loads(train_bc(cfg).read_text())
    assert summary["final_val_loss"] is not None
    return summary


def gain(summary_path: Path, base: dict) -> float:
    s = json.loads(summary_path.read_text())
    return s["final_success_rate"] - base["final_success_rate"]


def test_the_base_is_weak_but_not_useless(weak_base: dict) -> None:
    assert 0.05 <= weak_base["final_success_rate"] <= 0.7, weak_base["final_success_rate"]


def test_residual_rl_improves_on_the_base(weak_base: dict, tmp_path: Path) -> None:
    cfg = load_config(["algo=residual", f"residual.base={weak_base['checkpoint']}", f"run_dir={tmp_path}",
                       "loop.env_steps=1500", "loop.eval_every=500", "loop.stop_at_success=0.9", *EVAL])  # fmt: skip
    assert gain(train(cfg), weak_base) >= 0.25


def test_dsrl_improves_on_the_base(weak_base: dict, tmp_path: Path) -> None:
    cfg = load_config(["algo=dsrl", f"dsrl.base={weak_base['checkpoint']}", f"run_dir={tmp_path}",
                       "loop.env_steps=800", "loop.eval_every=200", "loop.stop_at_success=0.9", *EVAL])  # fmt: skip
    assert gain(train(cfg), weak_base) >= 0.2
