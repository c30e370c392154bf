"""A run is never lost without a word: a run dir that holds a run is not overwritten, and Ctrl-C saves."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

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


class _Train:
    """`robot-rl train` started the way a script starts a background job (`robot-rl train ... &`: SIGINT ignored,
    which Python keeps), its stderr read line by line as it arrives (tqdm ends its lines with \\r)."""

    def __init__(self, run: Path, *overrides: str) -> None:
        args = ["train", f"run_dir={run}", "loop.eval_every=0", "loop.checkpoint_every=0", "profile=cpu",
                "threads=1", *overrides]  # fmt: skip
        env = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}
        self.proc = subprocess.Popen([sys.executable, "-m", "robot_rl.cli", *args], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True, env=env,
                                     preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))  # fmt: skip
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        line = ""
        while ch := self.proc.stderr.read(1):
            line += ch
            if ch in "\r\n":
                self.lines.append(line)
                line = ""
        self.lines.append(line)

    def wait_for(self, pattern: str, timeout_s: float = 300) -> re.Match:
        """The first stderr line matching `pattern`, once it has been written."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.proc.poll() is None:
            for line in list(self.lines):
                if m := re.search(pattern, line):
                    return m
            time.sleep(0.05)
        self.proc.kill()
        raise AssertionError(f"no {pattern!r} on stderr: {''.join(self.lines)[-2000:]}")

    def interrupt(self, timeout_s: float = 120) -> tuple[int | None, str]:
        """SIGINT; (exit code, all of stderr) once it exited (None, if it had not within `timeout_s`: killed)."""
        self.proc.send_signal(signal.SIGINT)
        try:
            code = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            code = None
        self._reader.join(10)
        return code, "".join(self.lines)


def test_ctrl_c_in_train_saves_a_checkpoint_and_the_summary(tmp_path: Path) -> None:
    """SIGINT once the training loop runs (the progress bar counts steps: no fixed sleep, whatever the load) saves
    and exits 130, also where SIGINT was inherited ignored (a shell's background job): that dropped it, and the
    run went on training."""
    run = tmp_path / "run"
    train = _Train(run, "loop.env_steps=100000", "demos.n_episodes=2")
    steps = int(train.wait_for(r"train:.*\| *([1-9]\d*)/100000").group(1))
    code, err = train.interrupt()
    assert code == 130, err[-2000:]
    assert "Traceback" not in err and f"resume={run}" in err
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["env_steps"] >= steps
    saved = run / "checkpoints" / (run / "checkpoints" / "latest").read_text().strip()
    assert json.loads((saved / "counters.json").read_text())["env_steps"] == summary["env_steps"]
    assert main(["report", str(run)]) == 2  # an interrupted run has no final evaluation to report


def test_ctrl_c_during_the_final_evaluation_saves_the_run(tmp_path: Path) -> None:
    """The step budget is spent and the final evaluation runs (minutes in a real run): Ctrl-C there skips it and
    saves the run as interrupted, which `resume=` finishes. It used to exit 130 with nothing saved at all."""
    run = tmp_path / "run"
    train = _Train(run, "loop.env_steps=100", "loop.final_eval_episodes=500", "demos.n_episodes=2")
    train.wait_for(r"train:.*\| *100/100")  # the bar's last line: the loop is over
    code, err = train.interrupt()
    assert code == 130, err[-2000:]
    assert "Traceback" not in err and f"resume={run}" in err
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["env_steps"] == 100 and summary["final_success_rate"] is None
    assert (run / "checkpoints" / "latest").read_text().strip() == "step_00000100"


def test_ctrl_c_during_start_up_ends_train_with_one_line(tmp_path: Path) -> None:
    """SIGINT while the scripted demos are collected, before training: exit 130 with one line, nothing saved."""
    run = tmp_path / "run"
    train = _Train(run, "loop.env_steps=100", "demos.n_episodes=200")
    train.wait_for(r"episodes [1-9]\d*/200")
    code, err = train.interrupt()
    assert code == 130, err[-2000:]
    assert "Traceback" not in err and err.rstrip().endswith("robot-rl train: interrupted")
    assert not (run / "summary.json").exists() and not (run / "checkpoints").exists()


def test_ctrl_c_that_a_library_wrapped_is_still_an_interrupt(monkeypatch, capsys) -> None:
    """Ctrl-C while a C extension imports (mujoco, at start-up) surfaces as `ImportError: initialization failed`
    raised from the KeyboardInterrupt: one line and 130, not a traceback and 1. Other errors stay errors."""
    import robot_rl.cli as cli

    def interrupted_import(args: list[str]) -> int:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as e:
            raise ImportError("initialization failed") from e

    monkeypatch.setitem(cli.COMMANDS, "train", interrupted_import)
    assert main(["train"]) == 130
    assert capsys.readouterr().err == "robot-rl train: interrupted\n"

    def failed_import(args: list[str]) -> int:
        raise ImportError("no module named nosuch")

    monkeypatch.setitem(cli.COMMANDS, "train", failed_import)
    with pytest.raises(ImportError):
        main(["train"])


def test_sigint_inherited_ignored_is_caught_again(monkeypatch) -> None:
    """A shell's background job starts with SIGINT ignored; every command catches it again."""
    import robot_rl.cli as cli

    monkeypatch.setitem(cli.COMMANDS, "train", lambda args: 0)
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        assert main(["train"]) == 0
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, before)
