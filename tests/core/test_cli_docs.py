"""docs/cli.md is generated from the commands' parsers and cannot drift; old spellings keep working for a release."""

from __future__ import annotations

from pathlib import Path

import pytest

from robot_rl.cli import COMMANDS
from robot_rl.commands import COMMANDS as MODULES

ROOT = Path(__file__).resolve().parents[2]


def test_docs_cli_md_is_up_to_date() -> None:
    pytest.importorskip("peft", reason="vla-sft's flags need the vla extra")
    from robot_rl.commands.docs import REGENERATE, render

    assert (ROOT / "docs" / "cli.md").read_text() == render(), f"docs/cli.md is stale: run `{REGENERATE}`"


def test_every_verb_is_a_module_of_robot_rl_commands() -> None:
    assert list(COMMANDS) == list(MODULES)
    for name, module in MODULES.items():
        assert module == "robot_rl.commands." + name.replace("-", "_")
        assert (ROOT / "robot_rl" / "commands" / f"{name.replace('-', '_')}.py").is_file()


@pytest.mark.parametrize(
    "command, argv, dest, value, notice",
    [
        ("sim_robot", ["--hz", "50"], "physics_hz", 50.0, "`--hz` is deprecated, use `--physics-hz`"),
        ("deploy", ["run", "--hz", "20"], "control_hz", 20.0, "`--hz` is deprecated, use `--control-hz`"),
        ("collect", ["s", "-n", "1", "--hz", "5"], "control_hz", 5.0, "`--hz` is deprecated, use `--control-hz`"),
        ("collect", ["s", "-n", "1", "--backend", "robot"], "backend", "robot", "`--backend` is deprecated"),
        ("collect", ["s", "-n", "1", "--device", "keyboard"], "teleop", "keyboard", "`--device` is deprecated"),
        ("eval", ["run", "--video", "v"], "out", Path("v"), "`--video` is deprecated, use `--out`"),
    ],
)
def test_an_old_flag_still_works_with_one_line_notice(capsys, command, argv, dest, value, notice) -> None:
    import importlib

    p = importlib.import_module(f"robot_rl.commands.{command}").build_parser()
    ns = p.parse_intermixed_args(argv) if command != "collect" else p.parse_args(argv)
    err = capsys.readouterr().err
    assert getattr(ns, dest) == value and notice in err and len(err.strip().splitlines()) == 1
    p.parse_args(argv[:-2] if command != "deploy" else ["run"])
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("command, before", [("deploy", ["run"]), ("sim_robot", []), ("gripper_bridge", [])])
def test_positional_robot_overrides_still_work_with_one_line_notice(capsys, command, before) -> None:
    import importlib

    from robot_rl.commands.common import robot_from_args

    p = importlib.import_module(f"robot_rl.commands.{command}").build_parser()
    args = ["--robot", "sim", "reset_timeout_s=61", "--robot-set", "lockstep=true"]
    robot = robot_from_args(p, p.parse_intermixed_args([*before, *args]))
    err = capsys.readouterr().err
    assert robot.reset_timeout_s == 61 and robot.lockstep
    assert "`reset_timeout_s=61` is deprecated, use `--robot-set reset_timeout_s=61`" in err
    assert len(err.strip().splitlines()) == 1
    robot = robot_from_args(p, p.parse_intermixed_args([*before, "--robot-set", "reset_timeout_s=61"]))
    assert robot.reset_timeout_s == 61 and capsys.readouterr().err == ""


def test_collect_picks_the_robot_from_either_spelling(monkeypatch, tmp_path: Path, capsys) -> None:
    import robot_rl.commands.collect as command
    import robot_rl.demos.collect as library

    seen = []
    monkeypatch.setattr(library, "collect", lambda cfg, *a, **k: seen.append((cfg.backend, cfg.robot)) or _Stats())
    store = str(tmp_path / "s")
    for argv in (["--robot", "franka"], ["--backend", "robot", "--robot", "franka"], ["--backend", "robot"], [],
                 ["--backend", "sim"]):  # fmt: skip
        command.main([store, "-n", "1", *argv])
    assert seen == [("robot", "franka"), ("robot", "franka"), ("robot", "sim"), ("sim", "sim"), ("sim", "sim")]


class _Stats:
    kept = steps = bytes_written = 0
    write_s = 1.0


def test_a_positional_output_still_works_with_one_line_notice(capsys) -> None:
    from robot_rl.commands.classifier import build_parser
    from robot_rl.commands.common import resolve_out

    p = build_parser()
    ns = p.parse_args(["train", "store", "clf.safetensors"])
    resolve_out(p, ns)
    assert str(ns.out) == "clf.safetensors" and "use `--out clf.safetensors`" in capsys.readouterr().err
    ns = p.parse_args(["train", "store", "--out", "c.safetensors"])
    resolve_out(p, ns)
    assert str(ns.out) == "c.safetensors" and capsys.readouterr().err == ""


def test_plot_report_is_plot_dataset(monkeypatch, capsys, tmp_path: Path) -> None:
    import robot_rl.demos.report as report
    from robot_rl.cli import main

    monkeypatch.setattr(report, "html_report", lambda store, out, chosen: Path(out) / "index.html")
    assert main(["plot", "report", "s", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr()
    assert out.out.strip() == str(tmp_path / "index.html") and "use `plot dataset`" in out.err
    assert main(["plot", "dataset", "s", "--out", str(tmp_path)]) == 0 and capsys.readouterr().err == ""
