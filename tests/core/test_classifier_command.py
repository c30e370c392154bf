"""`robot-rl classifier train` says in one line when its classifier pays few of the test episodes' successes at its
threshold: on a drawn cell one paid none (test recall 0 at 0.99996), and fine-tuning on its reward took two sim
policies from 0.62 and 0.50 to 0.00 (docs/log/benchmarks.md, "Sim to robot"). There the threshold was set by the
frame before the person's success key, a success labelled none: `--key-lag-s` leaves such frames out."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from robot_rl.commands.classifier import main
from robot_rl.demos.store import EpisodeStore


def _store(path: Path, separable: bool, lagged: int = 0) -> Path:
    """Episodes whose last 5 frames are successes: at the goal's height (separable) or anywhere (not); the `lagged`
    frames before them are successes too, labelled none (a person's key lags the scene), recorded at 10 Hz."""
    rng = np.random.default_rng(0)
    with EpisodeStore(path, "w") as st:
        for _ in range(10):
            z = rng.uniform(0.13, 0.2, 25)
            if separable:
                z[20 - lagged :] = rng.uniform(0.06, 0.07, 5 + lagged)
            tcp = np.column_stack([rng.uniform(0.5, 0.6, 25), rng.uniform(-0.05, 0.05, 25), z]).astype(np.float32)
            meta = {"state_layout": {"tcp_pos": [0, 3]}, "cameras": [], "robot": {"control_hz": 10.0}}
            st.add_episode({"state": tcp, "label": np.arange(25) >= 20}, meta)
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


@pytest.mark.parametrize("key_lag_s", ["0", "0.2"])
def test_frames_a_lagging_key_labelled_none_are_left_out(key_lag_s: str, tmp_path: Path, capsys) -> None:
    """One success frame before each key press: kept as a negative, it lifts the threshold over the successes."""
    import json

    store = _store(tmp_path / "labels", separable=True, lagged=1)
    assert main(["train", str(store), "--out", str(tmp_path / "c.safetensors"), "--steps", "200",
                 "--key-lag-s", key_lag_s]) == 0  # fmt: skip
    report = json.loads(capsys.readouterr().out)
    left_out = 2 * 10  # frames a 0.2 s lag leaves out of the 25 in each of 10 episodes at 10 Hz
    frames = sum(report[k]["positives"] + report[k]["negatives"] for k in ("train", "validation", "test"))
    if key_lag_s == "0":
        assert frames == 250 and report["test"]["recall"] < 0.9, report["test"]  # 0.6: unpaid successes
    else:
        assert frames == 250 - left_out and report["test"]["recall"] == 1.0, report["test"]


def test_the_key_lag_is_a_persons_only() -> None:
    """Left out by default where a person pressed the keys; an oracle's labels keep their nearest misses."""
    from robot_rl.loop.classifier import PERSON_KEY_LAG_S, key_lag

    people = [{"device": "spacemouse"}, {"device": "simulated", "operator": "person"}]
    oracles = [{"device": "scripted"}, {"device": "simulated", "operator": "oracle"}, {"device": "simulated"}]
    assert [key_lag(m, None) for m in people] == [PERSON_KEY_LAG_S] * 2
    assert [key_lag(m, None) for m in oracles] == [0.0] * 3
    assert key_lag(people[0], 0.2) == key_lag(oracles[0], 0.2) == 0.2
