"""Dataset tools over episode stores: info, validate (+repair), merge, split, filter.

Every tool that writes goes through EpisodeStore.add_episode, so outputs carry the same commit record
and CRCs as collected stores and are crash-safe in the same way.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.demos.store import SOURCES, EpisodeStore

__all__ = ["key_specs", "info", "validate", "merge", "split", "filter_store", "copy_episodes", "main"]

# Per-step keys the RL side relies on, with the dtype kind each must have.
_REQUIRED = {"action": "f", "reward": "f", "terminated": "b", "truncated": "b", "intervened": "b"}


def disk_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def key_specs(st: EpisodeStore) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
    """dtype and row shape per data key (an empty read carries both)."""
    return {k: (x.dtype, x.shape[1:]) for k in st.keys for x in [st.read(k, 0, 0)]}


def info(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Keys, shapes, episode count and lengths, success rate, disk size and compression ratio."""
    with EpisodeStore(path, "r") as st:
        n = len(st)
        ends = st.episode_ends
        lengths = np.diff(np.concatenate([[0], ends])) if n else np.zeros(0, np.int64)
        metas = [st.meta(i) for i in range(n)]
        specs = key_specs(st)
        keys = {k: {"dtype": dt.name, "shape": list(shape)} for k, (dt, shape) in specs.items()}
        raw = sum(dt.itemsize * math.prod(shape) for dt, shape in specs.values()) * st.n_steps
    size = disk_bytes(Path(path))
    sources: dict[str, int] = {}
    tasks: dict[str, int] = {}
    for m in metas:
        sources[str(m.get("source"))] = sources.get(str(m.get("source")), 0) + 1
        tasks[str(m.get("task"))] = tasks.get(str(m.get("task")), 0) + 1
    return {
        "path": str(path),
        "n_episodes": n,
        "n_steps": int(ends[-1]) if n else 0,
        "keys": keys,
        "length": {"min": int(lengths.min()), "mean": float(lengths.mean()), "max": int(lengths.max())} if n else {},
        "success_rate": float(np.mean([bool(m.get("success")) for m in metas])) if n else float("nan"),
        "sources": sources,
        "tasks": tasks,
        "disk_bytes": size,
        "raw_bytes": int(raw),
        "compression_ratio": raw / size if size else float("nan"),
    }


def _semantic_problems(st: EpisodeStore) -> list[str]:
    """Checks beyond the store's own integrity: meta consistency and the RL keys' dtypes and values."""
    problems = []
    specs = key_specs(st)
    for k, kind in _REQUIRED.items():
        if k in specs and specs[k][0].kind != kind:
            problems.append(f"key {k!r} has dtype {specs[k][0]}, expected kind {kind!r}")
    ends = st.episode_ends
    for i in range(len(st)):
        m = st.meta(i)
        length = int(ends[i] - (ends[i - 1] if i else 0))
        if m.get("source") is not None and m["source"] not in SOURCES:
            problems.append(f"episode {i}: meta source {m['source']!r} not in {sorted(SOURCES)}")
        if "length" in m and m["length"] != length:
            problems.append(f"episode {i}: meta length {m['length']} != stored {length}")
        if "action" in specs:
            a = st.episode(i, ["action"])["action"]
            if not np.isfinite(a).all():
                problems.append(f"episode {i}: non-finite actions")
        if "terminated" in specs and "truncated" in specs:
            ep = st.episode(i, ["terminated", "truncated"])
            if (ep["terminated"][:-1] | ep["truncated"][:-1]).any():
                problems.append(f"episode {i}: episode ends before its last step")
    return problems


def validate(path: str | os.PathLike[str], repair: bool = False) -> dict[str, Any]:
    """Store invariants (commit record, chunks, CRCs of every row) plus semantic checks; optionally repair."""
    if repair:
        with EpisodeStore(path, "a", strict=False) as st:
            fixed = st.repair()
    with EpisodeStore(path, "r", strict=False) as st:
        report = st.validate()
        if report["ok"]:
            report["problems"] = _semantic_problems(st)
            report["ok"] = not report["problems"]
    if repair:
        report["repair"] = fixed
    return report


def copy_episodes(
    sources: Sequence[tuple[EpisodeStore, int]], out: str | os.PathLike[str], extra_meta: dict[str, Any] | None = None
) -> int:
    """Write the given (store, episode) pairs into a new store at `out`; returns the count."""
    if Path(out, "commit.json").exists():
        raise FileExistsError(f"{out} already exists; refusing to overwrite")
    with EpisodeStore(out, "a") as dst:
        for st, i in sources:
            meta = {**st.meta(i), **(extra_meta or {}), "origin": {"store": str(st.path), "episode": i}}
            dst.add_episode(st.episode(i), meta=meta, final=st.final(i))
        return len(dst)


def merge(inputs: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str]) -> int:
    """Concatenate stores with identical key specs (checked per episode by the writer)."""
    stores = [EpisodeStore(p, "r") for p in inputs]
    try:
        return copy_episodes([(st, i) for st in stores for i in range(len(st))], out)
    finally:
        for st in stores:
            st.close()


def split(
    path: str | os.PathLike[str], out_dir: str | os.PathLike[str], val_fraction: float = 0.1, seed: int = 0
) -> dict[str, int]:
    """Random split by episode into out_dir/train and out_dir/val (never splits an episode)."""
    with EpisodeStore(path, "r") as st:
        val, train = split_episodes(len(st), val_fraction, seed)
        return {
            "train": copy_episodes([(st, int(i)) for i in train], Path(out_dir) / "train"),
            "val": copy_episodes([(st, int(i)) for i in val], Path(out_dir) / "val"),
        }


def split_episodes(n: int, val_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(val, train) episode indices, sorted; at least one val episode when n > 1 and val_fraction > 0."""
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
    n_val = min(n - 1, max(1, round(n * val_fraction))) if n > 1 and val_fraction > 0 else 0
    perm = np.random.default_rng(seed).permutation(n)
    return np.sort(perm[:n_val]), np.sort(perm[n_val:])


def filter_store(
    path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    success: bool | None = None,
    source: str | None = None,
    task: str | None = None,
    min_length: int = 0,
    max_length: int | None = None,
) -> int:
    """Copy the episodes whose meta matches every given condition."""

    def keep(m: dict[str, Any]) -> bool:
        n = int(m.get("length", 0))
        return (
            (success is None or bool(m.get("success")) == success)
            and (source is None or m.get("source") == source)
            and (task is None or m.get("task") == task)
            and n >= min_length
            and (max_length is None or n <= max_length)
        )

    with EpisodeStore(path, "r") as st:
        return copy_episodes([(st, i) for i in range(len(st)) if keep(st.meta(i))], out)


def _print(obj: Any) -> None:
    print(json.dumps(obj, indent=1, default=str))


def main(argv: list[str]) -> int:
    """`robot-rl dataset info|validate|merge|split|filter`."""
    p = argparse.ArgumentParser(prog="robot-rl dataset", description="episode store tools")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("info", help="shapes, counts, lengths, success rate, disk size")
    s.add_argument("store", type=Path)
    s = sub.add_parser("validate", help="check every invariant; exit 1 on problems")
    s.add_argument("store", type=Path)
    s.add_argument("--repair", action="store_true", help="drop damaged / torn episodes (keeps the intact prefix)")
    s = sub.add_parser("merge", help="concatenate stores")
    s.add_argument("inputs", type=Path, nargs="+")
    s.add_argument("--out", type=Path, required=True)
    s = sub.add_parser("split", help="train/val split by episode")
    s.add_argument("store", type=Path)
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--val", type=float, default=0.1)
    s.add_argument("--seed", type=int, default=0)
    s = sub.add_parser("filter", help="copy matching episodes")
    s.add_argument("store", type=Path)
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--success", choices=("true", "false"))
    s.add_argument("--source", choices=sorted(SOURCES))
    s.add_argument("--task")
    s.add_argument("--min-length", type=int, default=0)
    s.add_argument("--max-length", type=int)
    ns = p.parse_args(argv)
    commands: dict[str, Callable[[], int]] = {
        "info": lambda: _print(info(ns.store)) or 0,
        "validate": lambda: _report_validation(validate(ns.store, repair=ns.repair)),
        "merge": lambda: _print({"episodes": merge(ns.inputs, ns.out)}) or 0,
        "split": lambda: _print(split(ns.store, ns.out, ns.val, ns.seed)) or 0,
        "filter": lambda: (
            _print(
                {
                    "episodes": filter_store(
                        ns.store,
                        ns.out,
                        success=None if ns.success is None else ns.success == "true",
                        source=ns.source,
                        task=ns.task,
                        min_length=ns.min_length,
                        max_length=ns.max_length,
                    )
                }
            )
            or 0
        ),
    }
    return commands[ns.cmd]()


def _report_validation(report: dict[str, Any]) -> int:
    _print(report)
    if not report["ok"]:
        print(f"INVALID: {len(report['problems'])} problem(s)", file=sys.stderr)
    return 0 if report["ok"] else 1
