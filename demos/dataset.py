"""Dataset tools over episode stores: info, validate (+repair), merge, split, filter.

Every tool that writes goes through EpisodeStore.add_episode, so outputs carry the same commit record
and CRCs as collected stores and are crash-safe in the same way. Tools that write a new store check every
input first and write it under a temporary name (`staged_store`), so a failure leaves no partial output;
repair rebuilds a store from exactly its readable episodes and keeps the original as a backup.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.demos.store import SOURCES, EpisodeStore, StoreCorruptError, staged_path, staged_store
from robot_rl.errors import UserError

__all__ = [
    "key_specs",
    "info",
    "validate",
    "repair_store",
    "merge",
    "split",
    "filter_store",
    "copy_episodes",
    "split_episodes",
]

# Per-step keys the RL side relies on, with the dtype kind each must have.
_REQUIRED = {"action": "f", "reward": "f", "terminated": "b", "truncated": "b", "intervened": "b"}


def disk_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def key_specs(st: EpisodeStore) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
    """dtype and row shape per data key (an empty read carries both)."""
    return {k: (x.dtype, x.shape[1:]) for k in st.keys for x in [st.read(k, 0, 0)]}


def info(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Keys, shapes, episode count and lengths, success rate, disk size and compression ratio, and whether every
    committed row decodes (a damaged store must not look normal)."""
    with EpisodeStore(path, "r") as st:
        integrity = st.validate()
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
        "ok": integrity["ok"],
        "problems": integrity["problems"],
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
    """Store invariants (commit record, chunks, CRCs of every row) plus semantic checks; optionally repair first."""
    fixed = repair_store(path) if repair else None
    with EpisodeStore(path, "r", strict=False) as st:
        report = st.validate()
        if report["ok"]:
            report["problems"] = _semantic_problems(st)
            report["ok"] = not report["problems"]
    if fixed is not None:
        report["repair"] = fixed
    return report


def unreadable(st: EpisodeStore) -> dict[int, list[str]]:
    """Episode -> the arrays of it that fail to decode or their CRC, each with why; intact episodes are absent."""
    damaged: dict[int, list[str]] = {}
    for i in range(len(st)):
        for k in st.keys:
            try:
                st.episode(i, [k])
            except StoreCorruptError as e:
                damaged.setdefault(i, []).append(f"data/{k} {_why(e)}")
        try:
            st.final(i)  # all final keys at once: they are one row each
        except StoreCorruptError as e:
            damaged.setdefault(i, []).append(f"final {_why(e)}")
    return damaged


def _why(e: StoreCorruptError) -> str:
    return str(e).split(": ", 1)[-1]


def repair_store(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Rebuild the store from exactly its readable episodes; the original stays, untouched, at `<path>.bak`.

    Only episodes with an unreadable array are dropped (not the whole tail after the first damage), and the
    report names each with the arrays at fault. A repair that would keep nothing is refused: the store stays as
    it is."""
    path = Path(path)
    with EpisodeStore(path, "r", strict=False) as st:
        damaged = unreadable(st)
        n = len(st)
        if not damaged and st.validate()["ok"]:
            return {"kept": n, "dropped": {}, "backup": None}
        keep = [i for i in range(n) if i not in damaged]
        if n and not keep:
            first = next(iter(damaged.values()))
            raise UserError(f"{path}: every one of its {n} episodes has an unreadable array (e.g. {first[0]}); "
                            "repair would keep nothing, so the store was left as it is")  # fmt: skip
        backup = path.with_name(path.name + ".bak")
        k = 1
        while backup.exists():
            k += 1
            backup = path.with_name(f"{path.name}.bak{k}")
        rebuilt = path.with_name(f".{path.name}.repaired")
        shutil.rmtree(rebuilt, ignore_errors=True)
        copy_episodes([(st, i) for i in keep], rebuilt, origin=False)
    os.rename(path, backup)
    os.rename(rebuilt, path)
    dropped = {str(i): why for i, why in damaged.items()}
    if dropped:
        print(f"repair dropped episode(s) {', '.join(dropped)} of {n}; the original store is at {backup}",
              file=sys.stderr)  # fmt: skip
    return {"kept": len(keep), "dropped": dropped, "backup": str(backup)}


def check_compatible(stores: Sequence[EpisodeStore]) -> None:
    """Stores written into one output must share every key's dtype and row shape; checked before any write."""
    filled = [st for st in stores if len(st)]
    for st in filled[1:]:
        first, want, specs = filled[0], key_specs(filled[0]), key_specs(st)
        if specs != want:
            only_a, only_b = sorted(set(want) - set(specs)), sorted(set(specs) - set(want))
            differ = sorted(k for k in set(specs) & set(want) if specs[k] != want[k])
            raise UserError(
                f"{first.path} and {st.path} do not fit together: keys only in the first {only_a}, only in the "
                f"second {only_b}, different dtype/shape {differ}"
            )


def copy_episodes(sources: Sequence[tuple[EpisodeStore, int]], out: str | os.PathLike[str], origin: bool = True) -> int:
    """Write the given (store, episode) pairs into a new store at `out`, whole or not at all; returns the count.
    `origin` records where each episode came from in its meta."""
    check_compatible(list({id(st): st for st, _ in sources}.values()))
    with staged_store(out) as dst:
        for st, i in sources:
            meta = {**st.meta(i), "origin": {"store": str(st.path), "episode": i}} if origin else st.meta(i)
            dst.add_episode(st.episode(i), meta=meta, final=st.final(i))
        return len(dst)


def merge(inputs: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str]) -> int:
    """Concatenate stores with identical key specs; every input is opened and checked before anything is
    written."""
    stores: list[EpisodeStore] = []
    try:
        for p in inputs:
            stores.append(EpisodeStore(p, "r"))
        check_compatible(stores)
        return copy_episodes([(st, i) for st in stores for i in range(len(st))], out)
    finally:
        for st in stores:
            st.close()


def split(
    path: str | os.PathLike[str], out_dir: str | os.PathLike[str], val_fraction: float = 0.1, seed: int = 0
) -> dict[str, int]:
    """Random split by episode into out_dir/train and out_dir/val (never splits an episode)."""
    with EpisodeStore(path, "r") as st, staged_path(out_dir) as tmp:
        train, val, _ = split_episodes(len(st), val_fraction, seed)
        return {
            "train": copy_episodes([(st, i) for i in train], tmp / "train"),
            "val": copy_episodes([(st, i) for i in val], tmp / "val"),
        }


def split_episodes(
    n: int, val_fraction: float, seed: int, test_fraction: float = 0.0
) -> tuple[list[int], list[int], list[int]]:
    """(train, val, test) episode indices, each sorted, disjoint, covering range(n). A fraction > 0 gets at least
    one episode as long as one is left for train. The same seed draws the same val episodes with or without a
    test set: test takes the first of one permutation, val the next."""
    for name, f in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
        if not 0.0 <= f < 1.0:
            raise ValueError(f"{name} must be in [0, 1), got {f}")
    n_test = min(n - 1, max(1, round(n * test_fraction))) if n > 1 and test_fraction > 0 else 0
    n_val = min(n - n_test - 1, max(1, round(n * val_fraction))) if n - n_test > 1 and val_fraction > 0 else 0
    perm = np.random.default_rng(seed).permutation(n)
    test, val, train = perm[:n_test], perm[n_test : n_test + n_val], perm[n_test + n_val :]
    return tuple(sorted(int(i) for i in part) for part in (train, val, test))  # type: ignore[return-value]


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
