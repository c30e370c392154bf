"""Every user mistake the bench day found, table-driven: exit code 2, one line on stderr naming the problem, no
traceback, and nothing changed on disk."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from robot_rl.cli import main
from robot_rl.demos.store import EpisodeStore


def _store(path: Path, task: str, images: bool, n: int = 2, damaged: bool = False) -> None:
    with EpisodeStore(path, "a", fsync=False) as st:
        for _ in range(n):
            data = {"state": np.zeros((5, 13), np.float32), "action": np.zeros((5, 4), np.float32)}
            if images:
                data["front"] = np.zeros((5, 64, 64, 3), np.uint8)
            st.add_episode(data, {"task": task, "source": "teleop", "seed": 0}, {"state": np.zeros(13, np.float32)})
    if damaged:
        chunk = path / "data" / "state" / "c.0.0"
        chunk.write_bytes(chunk.read_bytes()[:10])


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bench of runs and stores as a person would have them lying around."""
    root = tmp_path_factory.mktemp("bench")
    run = root / "run"
    (run / "checkpoints" / "final").mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"status": "finished", "final_success_rate": 1.0}))
    (run / "config.yaml").write_text("seed: 0\n")
    (run / "evals.jsonl").write_text("{}\n{}\n{}\n")
    (root / "half").mkdir()
    (root / "half" / "config.yaml").write_text("seed: 0\n")  # a failed start: config.yaml only
    (root / "foreign").mkdir()
    (root / "foreign" / "config.yaml").write_text("not: [a, robot_rl, config\n")
    (root / "foreign" / "model.safetensors").write_bytes(b"\0" * 16)
    _store(root / "pixel", "PickCube", images=True)
    _store(root / "state", "PickCube", images=False)
    _store(root / "peg", "PegInsert", images=False)
    _store(root / "damaged", "PickCube", images=False, damaged=True)
    _truncated_run(root / "truncated")
    return root


def _truncated_run(run: Path) -> None:
    """A real (tiny) run whose weights a copy cut short, as `head -c 1000 model.safetensors` leaves them."""
    from robot_rl.config import load_config
    from robot_rl.loop.trainer import train

    train(load_config([f"run_dir={run}", "loop.env_steps=20", "loop.eval_every=0", "loop.final_eval_episodes=1",
                       "loop.checkpoint_every=0", "demos.n_episodes=1", "profile=cpu"]))  # fmt: skip
    weights = run / "checkpoints" / "final" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])


CASES = [
    # (command line, with {b} for the bench dir; what the one line must name)
    ("train run_dir={b}/run loop.env_steps=50", "already holds a run"),
    ("train loop.env_steps=abc", "loop.env_steps=abc: expected int"),
    ("train loop.env_steps=-5", "loop.env_steps=-5: must be >= 1"),
    ("train obs=pixels randomization=visual sac.augment_gray=25", "sac.augment_gray=25.0: a probability"),
    ("train loop.env_stepz=5", "did you mean loop.env_steps"),
    ("train task=pick", "task=pick: expected one of"),
    ("train resume={b}/doesnotexist", "no run there"),
    ("train algo=residual", "algo=residual needs residual.base=<checkpoint folder"),
    ("train reward.source=oracle", "reward.source=oracle: expected one of env | classifier"),
    ("train robot=sim intervention.enabled=false randomization=robust", "robot=sim: env.sim and env.randomization are"),
    ("train robot=sim intervention.enabled=false env.obs=both", "robot=sim: obs=both adds the object's pose"),
    ("train env.for_robot=frank", "env.for_robot=frank: expected one of sim | franka | ur5e or a robot yaml file"),
    ("train env.for_robot=franka sim=maniskill task=PickCube-v1", "env.for_robot runs the MuJoCo tasks"),
    ("train robot=sim intervention.enabled=false env.for_robot=franka", "robot=sim: env.for_robot shapes a sim"),
    ("train obs=pixels env.for_robot=ur5e", "env.for_robot=ur5e: a camera run observes the robot's 6 joints"),
    ("train obs=pixels env.for_robot=sim env.cameras=[front,side]", "env.cameras ['side'] are not among its"),
    ("train init_from=/nonexistent/run", "init_from=/nonexistent/run: no such run dir or checkpoint folder"),
    ("train demos.path={b}/peg run_dir={b}/new", "trains PickCube: pick the matching task=peg_insert or store"),
    ("train demos.path={b}/state run_dir={b}/new obs=pixels", "has no 'front'"),
    ("dataset merge {b}/pixel {b}/state --out {b}/m", "do not fit together"),
    ("dataset validate {b}/damaged --repair", "repair would keep nothing"),
    ("dataset info {b}/nostore", "no episode store"),
    ("dataset split {b}/pixel --out {b}/run", "already exists"),
    ("collect {b}/new -n 1 --task PickCub", "--task PickCub: unknown task; expected one of"),
    ("collect {b}/pixel -n 1", "pass --resume"),
    ("collect {b}/new -n 0", "must be >= 1"),
    ("collect {b}/new -n 1 --operator person", "--operator person is the simulated operator's: add --teleop simulated"),
    ("report {b}/half", "holds a finished run"),
    ("eval {b}/nothing", "no such run dir"),
    ("eval {b}/half", "neither a run dir nor a checkpoint"),
    ("eval {b}/run", "checkpoint"),
    ("eval {b}/foreign", "not a robot_rl checkpoint"),
    ("eval {b}/run --episodes 0", "--episodes 0: must be >= 1"),
    ("eval {b}/truncated", "truncated/checkpoints/final/model.safetensors: damaged or truncated"),
    ("replay {b}/pixel --episode 7 --reexecute", "episode 7 out of range"),
    ("replay {b}/pixel", "give --out and/or --reexecute"),
    ("deploy {b}/run --robot nosuch", "--robot nosuch"),
    ("deploy {b}/truncated --robot sim", "truncated/checkpoints/final/model.safetensors: damaged or truncated"),
    ("sim-robot --task nope", "--task nope: unknown task; expected one of peg_insert, pick_cube"),
    ("sim-robot --task PickCube-v1", "--task PickCube-v1: not a task this command runs"),
    ("plot training {b}/half --out {b}/t.png", "no evaluations"),
    ("estop hold", "invalid choice: 'hold'"),
]
if importlib.util.find_spec("hid") is None:
    CASES.append(("collect {b}/new -n 1 --teleop spacemouse", "pip install -e '.[teleop]'"))


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


@pytest.mark.parametrize("line, problem", CASES, ids=[c[0].split(" {b}")[0] + " " + c[1][:24] for c in CASES])
def test_bad_input_is_one_line_exit_2_and_changes_nothing(bench: Path, capsys, line: str, problem: str) -> None:
    before = _snapshot(bench)
    rc = main(line.format(b=bench).split())  # a bug would raise here, i.e. print a traceback
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert problem in err and len(err.splitlines()) == 1, err
    assert _snapshot(bench) == before


def test_sim_robot_refuses_a_task_before_it_starts_anything(monkeypatch, capsys) -> None:
    import robot_rl.commands.sim_robot as command
    import robot_rl.real.sim_robot as sim_robot

    def started(*args, **kwargs):
        raise AssertionError("sim-robot got past its arguments")

    monkeypatch.setattr(command, "robot_from_args", started)  # the robot config
    for name in ("serve_sim_robot", "stop_on_signals", "SimRobot"):  # signal handlers, ROS
        monkeypatch.setattr(sim_robot, name, started)
    assert main(["sim-robot", "--task", "nope"]) == 2
    assert "peg_insert, pick_cube" in capsys.readouterr().err


def test_the_installed_command_prints_no_traceback(bench: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "robot_rl.cli", "dataset", "info", str(bench / "nostore")],
                         capture_output=True, text=True)  # fmt: skip
    assert out.returncode == 2 and "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert "--debug" in subprocess.run([sys.executable, "-m", "robot_rl.cli", "--help"], capture_output=True,
                                       text=True).stdout  # fmt: skip
    debug = subprocess.run([sys.executable, "-m", "robot_rl.cli", "--debug", "dataset", "info", str(bench / "nostore")],
                           capture_output=True, text=True)  # fmt: skip
    assert debug.returncode != 0 and "Traceback" in debug.stderr
