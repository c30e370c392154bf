"""What several commands share: the options that name a robot, the one-release deprecated spellings, output paths.

One name per thing across `robot-rl` commands: a robot is `--robot NAME` (`robot=NAME` in the hydra commands) and
its config overrides `--robot-set KEY=VALUE`, a rate says which one it is (`--control-hz`, `--camera-hz`,
`--physics-hz`), the device a person takes over with is `--teleop`, and a command's output is `--out PATH`.
An old spelling still works for one release and prints one line on stderr saying what replaces it.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from robot_rl.real.config import RobotConfig

# command -> {old spelling: new spelling}, filled as parsers are built; docs/cli.md lists them.
DEPRECATED: dict[str, dict[str, str]] = {}


def note_deprecated(prog: str, old: str, new: str) -> None:
    DEPRECATED.setdefault(prog, {})[old] = new


def deprecation(prog: str, old: str, new: str) -> None:
    """The one-line notice an old spelling prints; it keeps working until the next release."""
    print(f"{prog}: `{old}` is deprecated, use `{new}` (the old spelling goes in the next release)", file=sys.stderr)


class _Renamed(argparse.Action):
    """An old flag: stores into the new flag's dest, after a deprecation notice."""

    def __init__(self, option_strings: list[str], dest: str, new: str = "", **kwargs: Any) -> None:
        self.new = new
        super().__init__(option_strings, dest, **kwargs)

    def __call__(
        self, parser: argparse.ArgumentParser, ns: argparse.Namespace, values: Any, option: Any = None
    ) -> None:
        deprecation(parser.prog, str(option), self.new)
        setattr(ns, self.dest, values)


def renamed_flag(p: argparse.ArgumentParser, old: str, new: str, dest: str = "", **kwargs: Any) -> None:
    """`old` (hidden from --help) sets what `new` sets, with a notice; `new` must be added to `p` first. With
    `dest` it is stored apart, for the command to translate."""
    dest = dest or next(a.dest for a in p._actions if new.split()[0] in a.option_strings)
    p.add_argument(old, dest=dest, action=_Renamed, new=new, help=argparse.SUPPRESS, **kwargs)
    note_deprecated(p.prog, old, new)


def add_out(p: argparse.ArgumentParser, help: str, positional_before: bool = False) -> None:
    """`--out PATH`, the output of every command that writes one. `positional_before`: the command took it as
    its last positional argument until now; that still works (`resolve_out`) for one release."""
    from pathlib import Path

    p.add_argument("--out", type=Path, default=None, help=help + " (required)")
    if positional_before:
        p.add_argument("old_out", type=Path, nargs="?", default=None, help=argparse.SUPPRESS)
        note_deprecated(p.prog, "OUT (positional)", "--out OUT")


def resolve_out(p: argparse.ArgumentParser, ns: argparse.Namespace) -> None:
    """`ns.out` from `--out` or the old positional output; one of them is required."""
    old = getattr(ns, "old_out", None)
    if old is not None:
        if ns.out is not None:
            p.error(f"give the output once: --out {ns.out} (and not also {old} as a positional argument)")
        deprecation(p.prog, f"{old} as a positional output", f"--out {old}")
        ns.out = old
    if ns.out is None:
        p.error("the following arguments are required: --out")


def add_robot_args(
    p: argparse.ArgumentParser,
    default: str | None,
    overrides: bool = True,
    robot_help: str = "robot config: sim | franka | ur5e | a robot yaml",
    positional_before: bool = True,
) -> None:
    """`--robot`, `--domain` and `--robot-set KEY=VALUE` overrides, the same for every command that talks to an arm.
    `positional_before`: the command took its overrides as trailing `key=value` arguments until now; that still
    works (`robot_from_args`) for one release."""
    p.add_argument("--robot", default=default, help=robot_help)
    p.add_argument("--domain", type=int, default=None, help="DDS domain id (default: the robot config's)")
    if overrides:
        p.add_argument(
            "--robot-set",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="robot config override (repeatable), e.g. safety.max_velocity=0.2 or lockstep=true",
        )
        if positional_before:
            p.add_argument("old_robot_sets", nargs="*", default=[], help=argparse.SUPPRESS)
            note_deprecated(p.prog, "KEY=VALUE (positional)", "--robot-set KEY=VALUE")


def robot_sets(p: argparse.ArgumentParser, ns: argparse.Namespace) -> list[str]:
    """The `--robot-set` overrides, after any given the old positional way (with their notice)."""
    old = list(getattr(ns, "old_robot_sets", None) or [])
    if old:
        deprecation(p.prog, " ".join(old), " ".join(f"--robot-set {kv}" for kv in old))
    return [*old, *(getattr(ns, "robot_set", None) or [])]


def robot_from_args(p: argparse.ArgumentParser, ns: argparse.Namespace) -> RobotConfig:
    """The robot config `add_robot_args` options name."""
    from robot_rl.real.config import load_robot_config

    robot = load_robot_config(ns.robot, robot_sets(p, ns))
    if ns.domain is not None:
        robot.domain_id = ns.domain
    return robot
