"""`robot-rl eval --blank CAM` / `--per-camera`: a camera's frames come black, and the eval says how much of the
policy's success each camera carries (a policy that reads one camera only is found out before a real cell is);
`--out DIR` writes what it saw."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from robot_rl.cli import main
from robot_rl.envs import make_env
from robot_rl.errors import UserError
from robot_rl.evaluation import BlankCameras
from robot_rl.sim.config import EnvConfig


def test_a_blanked_camera_comes_black_and_the_others_do_not() -> None:
    env = BlankCameras(make_env(EnvConfig(obs="pixels", image_size=32), seed=0), ["front"])
    obs, _ = env.reset(seed=0)
    nxt, *_ = env.step(np.zeros(4, np.float32))
    for o in (obs, nxt):
        assert not o["front"].any() and o["front"].shape == (32, 32, 3)
        assert o["wrist"].any() and o["state"].any()
    with pytest.raises(UserError, match="cannot blank"):
        BlankCameras(env.env, ["side"])


@pytest.mark.slow
def test_per_camera_eval_blanks_each_camera_in_turn(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    run = ["train", f"run_dir={tmp_path}", "obs=pixels", "env.image_size=32", "loop.env_steps=5", "loop.eval_every=0",
           "loop.final_eval_episodes=1", "demos.n_episodes=2", "sac.trunk_pretrain_steps=2", "profile=cpu"]  # fmt: skip
    assert main(run) == 0
    capsys.readouterr()
    assert main(["eval", str(tmp_path), "--per-camera", "--episodes", "1"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["blanked"] for r in rows] == ["none", "front", "wrist"]
    assert all(0.0 <= r["success_rate"] <= 1.0 for r in rows)
    assert main(["eval", str(tmp_path), "--blank", "side", "--episodes", "1"]) == 2
    assert "cannot blank ['side']" in capsys.readouterr().err
    assert main(["eval", str(tmp_path), "--episodes", "1", "--out", str(tmp_path / "eval")]) == 0
    assert sorted(p.name for p in (tmp_path / "eval").iterdir()) == ["episode_000.mp4", "summary.json"]
