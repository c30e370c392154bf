"""`robot-rl classifier train` says in one line when its classifier pays few of the test episodes' successes at its
threshold: on a drawn cell one paid none (test recall 0 at 0.99996), and fine-tuning on its reward took two sim
policies from 0.62 and 0.50 to 0.00 (docs/log/benchmarks.md, "Sim to robot")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from robot_rl.commands.classifier import main
from robot_rl.demos.store import EpisodeStore


def _store(path: Path, separable: bool) -> Path:
    """Episodes whose last 5 frames are successes: at the goal's height (separable) or anywhere (not)."""
    rng = np.random.default_rng(0)
    with EpisodeStore(path, "w") as st:
        for _ in range(10):
            z = rng.uniform(0.13, 0.2, 25)
            if separable:
                z[20:] = rng.uniform(0.06, 0.07, 5)
            tcp = np.column_stack([rng.uniform(0.5, 0.6, 25), rng.uniform(-0.05, 0.05, 25), z]).astype(np.float32)
            st.add_episode({"state": tcp, "label": np.arange(25) >= 20},
                           {"state_layout": {"tcp_pos": [0, 3]}, "cameras": []})  # fmt: skip
    return path


@pytest.mark.parametrize("separable", [True, False])
def test_a_classifier_that_pays_few_test_successes_is_named_on_one_line(
    separable: bool, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    store = _store(tmp_path / "labels", separable)
    assert main(["train", str(store), "--out", str(tmp_path / "clf.safetensors"), "--steps", "200"]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    if separable:
        assert warnings == []
    else:
        assert len(warnings) == 1 and "of the test episodes' success frames" in warnings[0], warnings
