"""Imports run one way (docs/architecture.md): no import circles, no arrow up the layers, no ROS below the transport.

Read from the source with `ast`, nothing is imported: fast, and no ROS needed. Module-level and function-level
(lazy) imports both count, for the layers and for circles: a lazy import only delays the tie between two modules.
Imports under `if TYPE_CHECKING:` never run and are left out.
"""

from __future__ import annotations

import ast
import functools
import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# pyproject.toml's [tool.setuptools.package-dir]: package -> folder (checked below).
PACKAGE_DIRS = {
    "robot_rl": "robot_rl",
    "robot_rl.sim": "sim",
    "robot_rl.real": "real",
    "robot_rl.policies": "policies",
    "robot_rl.demos": "demos",
    "robot_rl.configs": "configs",
}

# Lowest first. A module may import its own layer and those below; its layer is its longest matching prefix.
# Layers that must not meet at all, whatever their order (sim and learning, ...), are in FORBIDDEN.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("core", ("robot_rl.types", "robot_rl.errors", "robot_rl.hardware", "robot_rl.nets", "robot_rl.configs",
              "robot_rl.limits")),
    ("data", ("robot_rl.buffers", "robot_rl.demos.store", "robot_rl.demos.dataset", "robot_rl.demos.sampler")),
    ("policies", ("robot_rl.policies",)),
    ("algos", ("robot_rl.algos",)),
    ("sim", ("robot_rl.sim",)),
    ("transport", ("robot_rl.transport",)),
    ("robot env", ("robot_rl.real",)),  # RobotEnv and what it stands on: config, safety, timing, msgs, scene
    ("envs", ("robot_rl.envs",)),  # the one env entry point: a sim env or a RobotEnv
    ("config", ("robot_rl.config",)),  # TrainConfig: the parts' configs, checked at load
    ("demos", ("robot_rl.demos",)),  # teleop, collect, replay, report, interop: over the data, sim and robot envs
    ("loop", ("robot_rl.loop", "robot_rl.checkpoint", "robot_rl.evaluation")),
    ("nodes", ("robot_rl.nodes", "robot_rl.real.deploy", "robot_rl.real.sim_robot", "robot_rl.real.estop",
               "robot_rl.real.gripper_bridge")),
    ("commands", ("robot_rl.commands",)),  # one module per `robot-rl` verb: argument parsing, then the library
    ("cli", ("robot_rl.cli",)),  # the dispatcher: picks a command, turns its errors into one line
)  # fmt: skip

ROS = "ROS 2"  # stands for rclpy and the ROS 2 message packages in FORBIDDEN


@dataclass(frozen=True)
class Rule:
    why: str
    importers: tuple[str, ...]
    imported: tuple[str, ...]
    unless: tuple[str, ...] = ()  # importers the rule leaves out
    allowed: tuple[str, ...] = ()  # imported modules the rule leaves out


FORBIDDEN = (
    Rule("ROS 2 and the transport stay in transport/, nodes/, real/ and the cli", ("robot_rl",),
         (ROS, "robot_rl.transport"), unless=("robot_rl.transport", "robot_rl.nodes", "robot_rl.real", "robot_rl.cli")),
    Rule("learning runs anywhere: no loop, robot, transport, node or simulator under it",
         ("robot_rl.policies", "robot_rl.algos", "robot_rl.nets", "robot_rl.buffers"),
         ("robot_rl.loop", "robot_rl.real", "robot_rl.transport", "robot_rl.nodes", "robot_rl.sim")),
    Rule("sim/ knows nothing of learning", ("robot_rl.sim",),
         ("robot_rl.algos", "robot_rl.loop", "robot_rl.policies", "robot_rl.buffers", "robot_rl.nets")),
    Rule("real/ never imports sim/: the sim robot node is the one bridge", ("robot_rl.real",), ("robot_rl.sim",),
         unless=("robot_rl.real.sim_robot",)),
    Rule("a robot PC loads a policy without MuJoCo: the checkpoint and its config import only sim/config.py",
         ("robot_rl.checkpoint", "robot_rl.config"), ("robot_rl.sim",), allowed=("robot_rl.sim.config",)),
)  # fmt: skip

# Known violations, (importer, imported), in files being refactored (issue #26): delete an entry once its import is
# gone. The test fails on an entry that no longer occurs or no longer breaks anything, so this cannot go stale.
KNOWN = {
    # TrainConfig holds the actor nodes' TransportConfig, defined beside the transport
    ("robot_rl.config", "robot_rl.transport.base"),
}


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str  # a robot_rl module (the longest one the name reaches), or a ROS 2 module
    path: str
    line: int
    lazy: bool  # inside a function: runs when first called, not when the importer loads

    def __str__(self) -> str:
        return f"{self.path}:{self.line} ({'lazy' if self.lazy else 'module level'})"


def is_ros(name: str) -> bool:
    top = name.split(".")[0]
    return top.startswith(("rclpy", "rcl_", "rmw", "rosidl")) or top.endswith(("_msgs", "_srvs", "_interfaces"))


def modules() -> dict[str, Path]:
    """Every module of the product code, by its import name."""
    found = {}
    for package, folder in PACKAGE_DIRS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            found[".".join((package, *parts[: -1 if parts[-1] == "__init__" else None]))] = path
    return found


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_in(module: str, source: str, path: str, known: Iterable[str], package: bool = False) -> list[Import]:
    """The robot_rl and ROS 2 imports of one module's source, `if TYPE_CHECKING:` blocks left out."""
    known = set(known)

    def reach(name: str) -> str:
        while name not in known and "." in name:
            name = name.rsplit(".", 1)[0]
        return name

    def targets(node: ast.Import | ast.ImportFrom) -> list[str]:
        if isinstance(node, ast.Import):
            return [a.name for a in node.names]
        base = node.module or ""
        if node.level:  # relative: from the importer's package
            anchor = module.split(".")[: len(module.split(".")) - node.level + package]
            base = ".".join(anchor + ([base] if base else []))
        return [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]

    found: list[Import] = []

    def visit(node: ast.AST, lazy: bool) -> None:
        if isinstance(node, ast.If) and _type_checking(node.test):
            for child in node.orelse:
                visit(child, lazy)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for name in targets(node):
                if name == "robot_rl" or name.startswith("robot_rl."):
                    found.append(Import(module, reach(name), path, node.lineno, lazy))
                elif is_ros(name):
                    found.append(Import(module, name, path, node.lineno, lazy))
        lazy = lazy or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for child in ast.iter_child_nodes(node):
            visit(child, lazy)

    visit(ast.parse(source), False)
    return found


@functools.cache
def all_imports() -> tuple[Import, ...]:
    mods = modules()
    return tuple(
        imp
        for name, path in mods.items()
        for imp in imports_in(name, path.read_text(), str(path.relative_to(ROOT)), mods, path.name == "__init__.py")
        if imp.imported != imp.importer
    )


def sites() -> dict[tuple[str, str], list[Import]]:
    """(importer, imported) -> where."""
    out: dict[tuple[str, str], list[Import]] = {}
    for imp in dict.fromkeys(all_imports()):  # `from x import a, b` is one site
        out.setdefault((imp.importer, imp.imported), []).append(imp)
    return out


def paths_from(graph: dict[str, set[str]], start: str) -> dict[str, str]:
    """Every node reachable from `start` -> the node it is first reached from (breadth first, so following them
    back gives a shortest path; `start` itself is in it only when a circle leads back to it)."""
    parent: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for node in frontier:
            for succ in sorted(graph.get(node, ())):
                if succ not in parent:
                    parent[succ] = node
                    nxt.append(succ)
        frontier = nxt
    return parent


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One shortest circle per strongly connected group of modules, as [a, b, ..., a] from its first module by
    name; fixing it shows the next one in that group, if any."""
    cycles, seen = [], set()
    for start in sorted(graph):
        if start in seen or start not in (back := paths_from(graph, start)):
            continue
        seen |= {n for n in back if start in paths_from(graph, n)}
        chain, node = [start], back[start]
        while node != start:
            chain.append(node)
            node = back[node]
        cycles.append([start, *reversed(chain[1:]), start])
    return cycles


def layer(module: str) -> int | None:
    best: tuple[int, int] | None = None  # (prefix length, layer)
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and (best is None or len(p) > best[0]):
                best = (len(p), i)
    return None if best is None else best[1]


def under(module: str, prefixes: Iterable[str]) -> bool:
    return any((p == ROS and is_ros(module)) or module == p or module.startswith(p + ".") for p in prefixes)


def broken_rules(importer: str, imported: str) -> list[str]:
    """Why `importer -> imported` is against the architecture; empty when it is fine."""
    why = [r.why for r in FORBIDDEN if under(importer, r.importers) and not under(importer, r.unless)
           and under(imported, r.imported) and not under(imported, r.allowed)]  # fmt: skip
    low, high = layer(importer), layer(imported)
    if low is not None and high is not None and high > low:
        why.append(f"up the layers: {LAYERS[low][0]} -> {LAYERS[high][0]}")
    return why


def graph_of(pairs: Iterable[tuple[str, str]]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for a, b in pairs:
        if b == "robot_rl" or b.startswith("robot_rl."):
            graph.setdefault(a, set()).add(b)
    return graph


def describe(chain: list[str], where: dict[tuple[str, str], list[Import]]) -> str:
    steps = [f"  {a} -> {b}  at {', '.join(map(str, where[a, b]))}" for a, b in itertools.pairwise(chain)]
    return " -> ".join(chain) + "\n" + "\n".join(steps)


def test_no_import_circles() -> None:
    where = sites()
    cycles = find_cycles(graph_of(pair for pair in where if pair not in KNOWN))
    assert not cycles, "import circles (break one arrow of each):\n" + "\n".join(describe(c, where) for c in cycles)


def test_imports_follow_the_layers() -> None:
    bad = [
        f"{a} -> {b}: {'; '.join(why)}\n  at {', '.join(map(str, at))}"
        for (a, b), at in sorted(sites().items())
        if (a, b) not in KNOWN and (why := broken_rules(a, b))
    ]
    assert not bad, "imports against docs/architecture.md:\n" + "\n".join(bad)


def test_known_violations_still_occur() -> None:
    """So KNOWN empties as the code is fixed, instead of hiding a new import of the same pair later."""
    where = sites()
    graph = graph_of(where)
    stale = []
    for a, b in sorted(KNOWN):
        if (a, b) not in where:
            stale.append(f"{a} -> {b}: no longer imported")
        elif not broken_rules(a, b) and a not in paths_from(graph, b):
            stale.append(f"{a} -> {b}: imported, but breaks no rule and closes no circle")
    assert not stale, "delete from KNOWN:\n" + "\n".join(stale)


def test_every_module_has_a_layer() -> None:
    """A new top-level module must be placed in LAYERS (a new file in a package takes its package's layer)."""
    assert [m for m in modules() if m != "robot_rl" and layer(m) is None] == []


def test_only_the_commands_parse_arguments() -> None:
    """Every `robot-rl` verb lives in robot_rl/commands/; the library below it knows nothing of argparse."""
    parsing = sorted(
        name
        for name, path in modules().items()
        if not (name == "robot_rl.cli" or name.startswith("robot_rl.commands"))
        and any(
            isinstance(node, (ast.Import, ast.ImportFrom))
            and any(a.name == "argparse" for a in node.names) | ((getattr(node, "module", None) or "") == "argparse")
            for node in ast.walk(ast.parse(path.read_text()))
        )
    )
    assert parsing == [], "argparse outside robot_rl/commands/ (move the parser there, call the library from it)"


def public_names(source: str) -> set[str]:
    """Functions and classes a module defines at its top level, less `_private` ones and `main`."""
    defs = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return {n.name for n in ast.parse(source).body if isinstance(n, defs) and not n.name.startswith("_")} - {"main"}


def test_each_public_name_is_defined_once() -> None:
    """Two functions sharing a name confuse a reader and `grep`: the less central one says what it does instead
    (`sim.maniskill.maniskill_goal_distance`, not a second `goal_distance`). The commands all define
    `build_parser` and are left out."""
    where: dict[str, list[str]] = {}
    for module, path in modules().items():
        if not module.startswith("robot_rl.commands"):
            for name in public_names(path.read_text()):
                where.setdefault(name, []).append(module)
    assert {name: found for name, found in where.items() if len(found) > 1} == {}


def test_public_names_skips_private_and_nested_definitions() -> None:
    source = "def a(): pass\ndef _b(): pass\ndef main(): pass\nclass C:\n    def d(self): pass\n"
    assert public_names(source) == {"a", "C"}


def test_package_dirs_match_pyproject() -> None:
    tomllib = pytest.importorskip("tomllib")
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["tool"]["setuptools"]["package-dir"] == PACKAGE_DIRS


# The checks check themselves: a planted circle and planted imports must be found.


def test_find_cycles_finds_a_planted_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"a", "e2"}, "e2": {"e"}}
    assert find_cycles(graph) == [["a", "b", "c", "a"], ["e", "e2", "e"]]
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_parser_sees_lazy_imports_and_skips_type_checking() -> None:
    source = """
from typing import TYPE_CHECKING
import numpy
from robot_rl.sim import envs
from robot_rl.types import Transition
if TYPE_CHECKING:
    from robot_rl.config import TrainConfig
else:
    import robot_rl.buffers
def f():
    import rclpy.qos
    from robot_rl.loop import trainer
    from . import sac
"""
    known = {"robot_rl.sim", "robot_rl.sim.envs", "robot_rl.types", "robot_rl.config", "robot_rl.buffers",
             "robot_rl.loop", "robot_rl.loop.trainer", "robot_rl.algos", "robot_rl.algos.sac"}  # fmt: skip
    got = {(i.imported, i.lazy) for i in imports_in("robot_rl.algos.x", source, "x.py", known)}
    assert got == {
        ("robot_rl.sim.envs", False),
        ("robot_rl.types", False),
        ("robot_rl.buffers", False),
        ("rclpy.qos", True),
        ("robot_rl.loop.trainer", True),
        ("robot_rl.algos.sac", True),
    }
    assert broken_rules("robot_rl.algos.x", "robot_rl.sim.envs") and broken_rules("robot_rl.algos.x", "rclpy.qos")
    assert broken_rules("robot_rl.algos.x", "robot_rl.loop.trainer")
    assert not broken_rules("robot_rl.loop.x", "robot_rl.types")
