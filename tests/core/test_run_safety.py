"""A run is never lost without a word: a run dir that holds a run is not overwritten, and Ctrl-C saves."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from robot_rl.cli import main


def test_train_refuses_a_run_dir_that_holds_a_run(tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    (run / "checkpoints" / "final").mkdir(parents=True)
    files = {"summary.json": '{"env_steps": 400}', "config.yaml": "seed: 0\n", "evals.jsonl": "{}\n{}\n{}\n"}
    for name, text in files.items():
        (run / name).write_text(text)
    assert main(["train", f"run_dir={run}", "loop.env_steps=50"]) == 2
    err = capsys.readouterr().err
    assert f"resume={run}" in err and len(err.strip().splitlines()) == 1
    assert {p.name: p.read_text() for p in run.iterdir() if p.is_file()} == files
    assert [p.name for p in (run / "checkpoints").iterdir()] == ["final"]


def test_ctrl_c_in_train_saves_a_checkpoint_and_the_summary(tmp_path: Path) -> None:
    run = tmp_path / "run"
    args = ["train", f"run_dir={run}", "loop.env_steps=100000", "loop.eval_every=0", "loop.checkpoint_every=0",
            "demos.n_episodes=2", "profile=cpu", "threads=1"]  # fmt: skip
    env = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}
    proc = subprocess.Popen([sys.executable, "-m", "robot_rl.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip
    deadline = time.time() + 120
    while not (run / "tb").exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.2)  # the tensorboard dir appears once training is about to start
    time.sleep(3.0)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err and f"resume={run}" in err
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["env_steps"] > 0
    saved = run / "checkpoints" / (run / "checkpoints" / "latest").read_text().strip()
    assert json.loads((saved / "counters.json").read_text())["env_steps"] == summary["env_steps"]
    assert main(["report", str(run)]) == 2  # an interrupted run has no final evaluation to report
