"""The shape of the training loop (issue #53): the trainer stays one readable file, its functions short, and
`TrainingRun` asks its cell instead of testing whether the run is on a robot. Read from the source with `ast`."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOOP = ROOT / "robot_rl" / "loop"


def _functions(path: Path) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    tree = ast.parse(path.read_text())
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def test_the_trainer_is_one_readable_file():
    lines = len((LOOP / "trainer.py").read_text().splitlines())
    assert lines <= 310, f"robot_rl/loop/trainer.py has {lines} lines; what differs per cell goes in loop/cells.py"


def test_no_function_in_the_loop_is_longer_than_a_screen():
    long = [
        f"{path.relative_to(ROOT)}:{f.lineno} {f.name} ({f.end_lineno - f.lineno + 1} lines)"
        for path in sorted(LOOP.glob("*.py"))
        for f in _functions(path)
        if f.end_lineno - f.lineno + 1 > 60
    ]
    assert not long, "functions over 60 lines: " + "; ".join(long)


def test_training_run_never_asks_whether_it_is_on_a_robot():
    source = (LOOP / "trainer.py").read_text()
    tree = ast.parse(source)
    run = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "TrainingRun")
    body = ast.get_source_segment(source, run)
    asks = re.findall(r"\.robot\b|RobotCell|SimCell|RobotEnv|lockstep", body)
    assert not asks, f"TrainingRun tests where it runs ({sorted(set(asks))}): ask its cell (loop/cells.py)"
    assert "self.cell" in body  # the test reads the class it means to
