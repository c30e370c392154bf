"""docs/cli.md from the commands' own parsers: `python -m robot_rl.commands.docs > docs/cli.md`.

tests/core/test_cli_docs.py regenerates it and fails when the committed file differs, so the table cannot drift
from the flags.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Any

from robot_rl.commands import COMMANDS
from robot_rl.commands.common import DEPRECATED

REGENERATE = "python -m robot_rl.commands.docs > docs/cli.md"
HYDRA = ("train", "launch", "learner")  # hydra overrides, no argparse: their keys come from TrainConfig

INTRO = f"""# `robot-rl` commands

Generated from the parsers in `robot_rl/commands/` by `{REGENERATE}`; a test fails when this file is stale.
`robot-rl <command> --help` prints the same for one command; `robot-rl --debug <command> ...` shows the traceback
of an error instead of its one-line message.

One name per thing across commands:

| thing | spelling |
|---|---|
| which robot | `--robot NAME` (`sim`, `franka`, `ur5e` or a robot yaml); `robot=NAME` in the hydra commands |
| a robot config override | `--robot-set KEY=VALUE` (repeatable) |
| a DDS domain | `--domain ID` |
| the device a person drives or takes over with | `--teleop DEVICE` |
| the policy's control rate | `--control-hz` |
| a camera's publish rate | `--camera-hz` |
| the simulator's physics rate | `--physics-hz` |
| what a command writes | `--out PATH` |

Old spellings still work for one release and print a one-line notice on stderr (last table).
"""


def _cell(text: Any) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _summary(module: Any) -> str:
    """The module docstring's first sentence after the command line: what the command does."""
    first = (module.__doc__ or "").strip().split("\n\n")[0]
    return _cell(first.split(": ", 1)[1] if ": " in first else first)


def _flags(p: argparse.ArgumentParser) -> list[str]:
    fmt = p._get_formatter()
    rows = ["| argument | default | meaning |", "|---|---|---|"]
    for a in p._actions:
        if a.help == argparse.SUPPRESS or isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        unset = a.default is None or a.default is False or a.default in ([], "", argparse.SUPPRESS) or a.required
        default = "" if unset else f"`{a.default}`"
        meaning = a.help or ""
        if a.required and a.option_strings:
            meaning = f"{meaning} (required)" if "(required)" not in meaning else meaning
        rows.append(f"| `{_cell(fmt._format_action_invocation(a))}` | {_cell(default)} | {_cell(meaning)} |")
    return rows


def _parser_section(p: argparse.ArgumentParser, level: int = 2) -> list[str]:
    lines = [f"{'#' * level} `{p.prog}`", "", _cell(p.description or ""), ""]
    subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
    if len(p._actions) > 1 + len(subs):
        lines += [*_flags(p), ""]
    for sub in subs:
        helps = {c.dest: c.help for c in sub._choices_actions}
        for name, child in sub.choices.items():
            child.description = child.description or helps.get(name, "")
            lines += _parser_section(child, level + 1)
    return lines


def _hydra_section() -> list[str]:
    from omegaconf import OmegaConf

    from robot_rl.commands.train import COMMON_KEYS
    from robot_rl.config import TrainConfig, config_keys, group_defaults, group_options

    cfg, defaults = OmegaConf.structured(TrainConfig), group_defaults()
    lines = ["## Hydra commands: train, launch, learner", ""]
    for name in HYDRA:
        lines.append(f"- `robot-rl {name}`: {_summary(importlib.import_module(COMMANDS[name]))}")
    lines += ["", "Config groups (`group=option`; the default in bold):", "", "| group | options |", "|---|---|"]
    for group, options in group_options().items():
        lines.append(f"| `{group}` | " + " \\| ".join(f"**{o}**" if o == defaults.get(group) else o for o in options)
                     + " |")  # fmt: skip
    lines += ["", "Common keys (`key=value`):", "", "| key | default | meaning |", "|---|---|---|"]
    for key, meaning in COMMON_KEYS.items():
        value = OmegaConf.select(cfg, key)
        lines.append(f"| `{key}` | {f'`{value}`' if value != '' else ''} | {_cell(meaning)} |")
    lines += ["", f"All {len(config_keys(TrainConfig))} keys and their defaults live in `robot_rl/config.py`.", ""]
    return lines


def render() -> str:
    DEPRECATED.clear()
    modules = {name: importlib.import_module(module) for name, module in COMMANDS.items()}
    lines = [INTRO, "| command | what it does |", "|---|---|"]
    anchor = {name: "hydra-commands-train-launch-learner" if name in HYDRA else f"robot-rl-{name}" for name in modules}
    lines += [f"| [`{name}`](#{anchor[name]}) | {_summary(m)} |" for name, m in modules.items()]
    lines += ["", *_hydra_section()]
    for m in modules.values():
        if hasattr(m, "build_parser"):
            lines += _parser_section(m.build_parser())
    lines += ["## Deprecated spellings (they go in the next release)", "", "| command | old | new |", "|---|---|---|"]
    for prog, renames in DEPRECATED.items():
        lines += [f"| `{prog}` | `{old}` | `{new}` |" for old, new in renames.items()]
    return "\n".join(lines).rstrip("\n") + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
