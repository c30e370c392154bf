"""Crash-safe zarr (v3) episode store for demonstrations and replay.

On-disk layout of one store (a directory)::

    commit.json          commit record, replaced atomically and written LAST; the only truth about
                         which episodes exist (ends, per-episode meta and CRCs, key specs, version)
    .lock                flock()ed by the single writer; the kernel drops it when the process dies
    zarr.json            root group (data/, meta/, final/ are groups too)
    data/<key>           rows of all episodes concatenated on axis 0 (time)
    final/<key>          one row per episode: the observation after the last step
    meta/episode_ends    int64 cumulative ends, a mirror of the record for plain-zarr readers

Appends write rows first and the record last, so a crash leaves at most an uncommitted tail that
readers never look at and the next writer truncates.  zarr's LocalStore replaces every chunk file
atomically, so rewriting a partly filled chunk cannot tear the committed rows inside it.

Handles are not thread-safe.  A reader opened while a writer appends keeps the snapshot it opened;
reopen to see new episodes.  Reading the last, still-growing shard of an image array during an
append can race with its replacement; episode() then raises StoreCorruptError (CRC) rather than
returning mixed data.
"""

from __future__ import annotations

import asyncio
import copy
import fcntl
import json
import logging
import math
import os
import re
import shutil
import zlib
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from zarr.codecs import BloscCodec
from zarr.core.sync import sync
from zarr.storage import LocalStore

from robot_rl.errors import UserError

__all__ = [
    "EpisodeStore",
    "StoreCorruptError",
    "StoreExistsError",
    "StoreLockedError",
    "StoreNotFoundError",
    "SOURCES",
    "FORMAT_VERSION",
    "staged_path",
    "staged_store",
]

FORMAT_NAME = "robot_rl.episode_store"
FORMAT_VERSION = 1
SOURCES = frozenset({"scripted", "teleop", "policy", "intervention"})

_COMMIT = "commit.json"
_LOCK = ".lock"
_ENDS = "meta/episode_ends"
# Rows bigger than this are frames: one chunk per frame (cheap random access) packed into shards
# (few files).  Smaller rows are chunked in blocks of up to _MAX_CHUNK_ROWS rows / _CHUNK_BYTES.
_FRAME_BYTES = 4096
_SHARD_ROWS = 64
_CHUNK_BYTES = 256 * 1024
_MAX_CHUNK_ROWS = 1024
_MAX_LISTED = 20
_KEY_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")
_WRITE_CONFIG = {"write_empty_chunks": True}  # every committed chunk must exist as a file

_log = logging.getLogger(__name__)


class StoreCorruptError(UserError, RuntimeError):
    """The on-disk store contradicts its commit record; `robot-rl dataset validate --repair` (or repair())."""


class StoreLockedError(UserError, RuntimeError):
    """Another process (or handle) already has the store open for writing."""


class StoreNotFoundError(UserError, FileNotFoundError):
    """No episode store at the given path."""


class EpisodeIndexError(UserError, IndexError):
    """An episode number past the store's committed episodes."""


class StoreExistsError(UserError, FileExistsError):
    """A tool that writes a new store was pointed at a path that already exists."""


@contextmanager
def staged_path(out: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary sibling of `out` to write into, renamed to `out` only when the block succeeds and removed
    otherwise: a tool that fails half-way (a bad second input, Ctrl-C, a full disk) leaves no partial output."""
    out = Path(out)
    if out.exists():
        raise StoreExistsError(f"{out} already exists; refusing to overwrite it")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.partial-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        yield tmp
        os.rename(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextmanager
def staged_store(out: str | os.PathLike[str], *, fsync: bool = True) -> Iterator[EpisodeStore]:
    """A new store that appears at `out` whole or not at all (see staged_path)."""
    with staged_path(out) as tmp, EpisodeStore(tmp, "a", fsync=fsync) as st:
        yield st


@dataclass(frozen=True)
class _Spec:
    dtype: np.dtype
    shape: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {"dtype": self.dtype.str, "shape": list(self.shape)}


@dataclass
class _Record:
    keys: dict[str, _Spec] = field(default_factory=dict)
    final_keys: dict[str, _Spec] = field(default_factory=dict)
    ends: list[int] = field(default_factory=list)
    episodes: list[dict[str, Any]] = field(default_factory=list)

    @property
    def n_steps(self) -> int:
        return self.ends[-1] if self.ends else 0

    def columns(self) -> dict[str, tuple[_Spec, int]]:
        """Array path -> (row spec, rows the record vouches for)."""
        n = len(self.ends)
        cols = {f"data/{k}": (s, self.n_steps) for k, s in self.keys.items()}
        cols.update({f"final/{k}": (s, n) for k, s in self.final_keys.items()})
        if self.keys:
            cols[_ENDS] = (_Spec(np.dtype(np.int64), ()), n)
        return cols

    def truncated(self, n: int) -> _Record:
        if n == 0:
            return _Record()
        return _Record(dict(self.keys), dict(self.final_keys), self.ends[:n], self.episodes[:n])

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "n_episodes": len(self.ends),
            "n_steps": self.n_steps,
            "episode_ends": self.ends,
            "keys": {k: s.to_json() for k, s in self.keys.items()},
            "final_keys": {k: s.to_json() for k, s in self.final_keys.items()},
            "episodes": self.episodes,
        }


def _parse_record(raw: bytes, where: Path) -> _Record:
    """Strict parse: a record we cannot fully trust is treated as no record at all."""
    try:
        obj = json.loads(raw)
        if obj.get("format") != FORMAT_NAME:
            raise ValueError(f"format is {obj.get('format')!r}, expected {FORMAT_NAME!r}")
        if obj.get("version") != FORMAT_VERSION:
            raise ValueError(f"unsupported format version {obj.get('version')!r}")

        def specs(d: dict[str, Any]) -> dict[str, _Spec]:
            return {str(k): _Spec(np.dtype(v["dtype"]), tuple(int(x) for x in v["shape"])) for k, v in d.items()}

        ends = [int(e) for e in obj["episode_ends"]]
        episodes = list(obj["episodes"])
        if not (obj["n_episodes"] == len(ends) == len(episodes)):
            raise ValueError("n_episodes, episode_ends and episodes disagree in length")
        if obj["n_steps"] != (ends[-1] if ends else 0):
            raise ValueError("n_steps disagrees with episode_ends")
        if any(not isinstance(e.get("meta"), dict) or not isinstance(e.get("crc"), dict) for e in episodes):
            raise ValueError("every episode entry needs 'meta' and 'crc' objects")
        rec = _Record(specs(obj["keys"]), specs(obj["final_keys"]), ends, episodes)
        if ends and not rec.keys:
            raise ValueError("episodes committed but no keys")
        return rec
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise StoreCorruptError(f"{where}: commit record is unparseable: {e}") from e


def _layout(spec: _Spec) -> dict[str, Any]:
    """Chunking and codec per row size: frames compress fast (lz4), low-dim data compresses well (zstd)."""
    row_nbytes = max(1, spec.dtype.itemsize * math.prod(spec.shape))
    shuffle = "shuffle" if spec.dtype.itemsize > 1 else "noshuffle"
    if row_nbytes > _FRAME_BYTES:
        return {
            "chunks": (1, *spec.shape),
            "shards": (_SHARD_ROWS, *spec.shape),
            "compressors": BloscCodec(cname="lz4", clevel=5, shuffle=shuffle),
        }
    rows = min(_MAX_CHUNK_ROWS, max(1, _CHUNK_BYTES // row_nbytes))
    return {"chunks": (rows, *spec.shape), "compressors": BloscCodec(cname="zstd", clevel=3, shuffle=shuffle)}


def _chunk_file(block: int, ndim: int) -> str:
    """Name of the file holding row block `block` (chunk key encoding 'default' with '.' separator)."""
    return "c." + ".".join([str(block)] + ["0"] * (ndim - 1))


def _crc(x: np.ndarray) -> int:
    return zlib.crc32(np.ascontiguousarray(x).view(np.uint8).reshape(-1))


def _fsync_path(p: Path) -> None:
    fd = os.open(p, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_json_atomic(path: Path, obj: Any, durable: bool) -> None:
    """Temp file + fsync + rename: readers see the old or the new record, never a torn one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(json.dumps(obj, separators=(",", ":")).encode())
        f.flush()
        if durable:
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if durable:
        _fsync_path(path.parent)


class _Column:
    """One zarr array plus what is needed to find its chunk files on disk."""

    def __init__(self, arr: zarr.Array, directory: Path) -> None:
        self.arr = arr
        self.dir = directory
        self.rows_per_file = int((arr.shards or arr.chunks)[0])
        self.sharded = arr.shards is not None

    def files_for(self, start: int, stop: int) -> list[str]:
        if stop <= start:
            return []
        return [
            _chunk_file(b, self.arr.ndim)
            for b in range(start // self.rows_per_file, (stop - 1) // self.rows_per_file + 1)
        ]

    def missing_files(self, n_rows: int) -> list[str]:
        present = set(os.listdir(self.dir))
        return [f for f in self.files_for(0, n_rows) if f not in present]


class EpisodeStore:
    """Append-only episode store with a single writer and any number of readers.

    mode: "r" read-only (no lock; sees only committed episodes), "a" create or append (takes the
    writer lock, truncates a torn uncommitted tail), "w" overwrite (takes the lock, deletes data).
    strict=False opens a store that fails its open-time checks so validate()/repair() can be used;
    reads of damaged arrays still raise StoreCorruptError.  fsync=False skips fsync (faster, survives
    process crashes but not power loss).
    """

    def __init__(
        self, path: str | os.PathLike[str], mode: str = "r", *, strict: bool = True, fsync: bool = True
    ) -> None:
        if mode not in ("r", "a", "w"):
            raise ValueError(f"mode must be 'r', 'a' or 'w', got {mode!r}")
        self.path = Path(path)
        self.mode = mode
        self._durable = fsync
        self._lock_fd: int | None = None
        self._fsync_pool: ThreadPoolExecutor | None = None
        self._cols: dict[str, _Column | None] = {}
        self._rec = _Record()
        self._problems: list[str] = []
        try:
            if mode == "r":
                if not (self.path / _COMMIT).is_file():
                    if (self.path / "zarr.json").exists():
                        raise StoreCorruptError(f"{self.path}: zarr data present but no {_COMMIT}")
                    raise StoreNotFoundError(f"no episode store at {self.path}")
            else:
                self.path.mkdir(parents=True, exist_ok=True)
                self._lock()
                if mode == "w":
                    self._clear()
                if not (self.path / _COMMIT).exists():
                    self._init_empty()
            self._zstore = LocalStore(self.path, read_only=mode == "r")
            self._load(strict)
            if mode != "r":
                self._recover()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ open / lock / recovery

    def _lock(self) -> None:
        fd = os.open(self.path / _LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise StoreLockedError(
                f"{self.path} is already open for writing (lock held by pid {holder}); only one writer is allowed"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._lock_fd = fd

    def _clear(self) -> None:
        entries = [p for p in self.path.iterdir() if p.name != _LOCK]
        if entries and not (self.path / _COMMIT).exists():
            raise ValueError(f"refusing to overwrite {self.path}: it is not empty and not an episode store")
        for p in entries:
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink()

    def _init_empty(self) -> None:
        stray = [p.name for p in self.path.iterdir() if p.name != _LOCK and not p.name.endswith(".tmp")]
        if stray:
            raise StoreCorruptError(f"{self.path}: has {sorted(stray)} but no {_COMMIT}; not opening it for writing")
        _write_json_atomic(self.path / _COMMIT, _Record().to_json(), self._durable)

    def _load(self, strict: bool) -> None:
        where = self.path / _COMMIT
        try:
            raw = where.read_bytes()
        except OSError as e:
            raise StoreCorruptError(f"{where}: cannot read commit record: {e}") from e
        self._rec = _parse_record(raw, where)
        self._cols = {name: self._open_column(name) for name in self._rec.columns()}
        self._problems = self._structure_problems()
        if self._problems and strict:
            raise StoreCorruptError(
                f"{self.path}: store is damaged (`robot-rl dataset validate {self.path} --repair` drops what is "
                "unreadable and keeps a backup): " + "; ".join(self._problems)
            )

    def _open_column(self, name: str) -> _Column | None:
        try:
            arr = zarr.open_array(store=self._zstore, path=name, mode="r" if self.mode == "r" else "r+")
        except Exception:  # missing or undecodable zarr.json; reported by _structure_problems
            return None
        if self.mode != "r":
            arr = arr.with_config(_WRITE_CONFIG)
        return _Column(arr, self.path / name)

    def _structure_problems(self) -> list[str]:
        """Cheap checks (metadata and file listing, no chunk decoding) run on every open."""
        problems = []
        ends = np.asarray(self._rec.ends, dtype=np.int64)
        if ends.size and (ends[0] <= 0 or np.any(np.diff(ends) <= 0)):
            problems.append("commit record: episode_ends is not strictly increasing from > 0")
        for name, (spec, need) in self._rec.columns().items():
            col = self._cols.get(name)
            if col is None:
                problems.append(f"{name}: array missing or its zarr.json is unreadable")
                continue
            if col.arr.dtype != spec.dtype or tuple(col.arr.shape[1:]) != spec.shape:
                problems.append(
                    f"{name}: on-disk dtype/row shape {col.arr.dtype}/{tuple(col.arr.shape[1:])} "
                    f"!= record {spec.dtype}/{spec.shape}"
                )
                self._cols[name] = None
                continue
            if col.arr.shape[0] < need:
                problems.append(f"{name}: {col.arr.shape[0]} rows on disk but the commit record vouches for {need}")
            missing = col.missing_files(min(need, col.arr.shape[0]))
            if missing:
                problems.append(
                    f"{name}: missing committed chunk file(s) {missing[:5]}{' ...' if len(missing) > 5 else ''}"
                )
        return problems

    def _recover(self) -> None:
        """Drop what a crashed writer left beyond the commit record."""
        columns = self._rec.columns()
        for name, (_, need) in columns.items():
            col = self._cols[name]
            if col is not None and col.arr.shape[0] > need:
                _log.warning(
                    "%s: dropping %d uncommitted row(s) of %s (torn append)", self.path, col.arr.shape[0] - need, name
                )
                col.arr.resize((need, *col.arr.shape[1:]))
        for group in ("data", "final", "meta"):
            gdir = self.path / group
            if not gdir.is_dir():
                continue
            for p in gdir.iterdir():
                if p.is_dir() and f"{group}/{p.name}" not in columns:
                    _log.warning("%s: removing uncommitted array %s/%s", self.path, group, p.name)
                    shutil.rmtree(p)
        for col in self._cols.values():
            if col is not None:
                for p in col.dir.glob("*.partial"):
                    p.unlink(missing_ok=True)
        for p in self.path.glob(f".{_COMMIT}.*.tmp"):
            p.unlink(missing_ok=True)
        root = zarr.open_group(store=self._zstore, mode="a", zarr_format=3)
        for group in ("data", "final", "meta"):
            root.require_group(group)

    def close(self) -> None:
        """Release the writer lock; the handle is unusable afterwards."""
        self._cols = {}
        if self._fsync_pool is not None:
            self._fsync_pool.shutdown()
            self._fsync_pool = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the only descriptor releases the flock
            self._lock_fd = None

    def __enter__(self) -> EpisodeStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ writing

    def add_episode(
        self,
        data: dict[str, np.ndarray],
        meta: dict[str, Any] | None = None,
        final: dict[str, np.ndarray] | None = None,
    ) -> int:
        """Append and commit one episode; returns its index.  Everything is checked before any write."""
        self._require_writer()
        if self._problems:
            raise StoreCorruptError(f"{self.path}: store is damaged, call repair() before appending")
        data, final, meta, T = self._checked_episode(data, final, meta)
        rec = self._rec
        first = not rec.keys
        if first:
            rec = _Record(
                {k: _Spec(v.dtype, v.shape[1:]) for k, v in data.items()},
                {k: _Spec(v.dtype, v.shape) for k, v in final.items()},
            )
            for name, (spec, _) in rec.columns().items():
                self._cols[name] = self._create_column(name, spec)
        i, start = len(rec.ends), rec.n_steps
        end = start + T
        writes = [(f"data/{k}", v, start) for k, v in data.items()]
        writes += [(f"final/{k}", v[None], i) for k, v in final.items()]
        crc = {name: _crc(rows) for name, rows, _ in writes}
        writes.append((_ENDS, np.array([end], dtype=np.int64), i))
        sync(_write_rows([(self._col(name).arr.async_array, lo, rows) for name, rows, lo in writes]))
        touched = [(self._col(name), lo, lo + len(rows)) for name, rows, lo in writes]
        if self._durable:
            # Concurrent fsyncs share journal commits, where one after another each waits for its own.
            paths = [col.dir / f for col, lo, hi in touched for f in [*col.files_for(lo, hi), "zarr.json"]]
            paths += [col.dir for col, _, _ in touched]
            if self._fsync_pool is None:
                self._fsync_pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="episode-store-fsync")
            list(self._fsync_pool.map(_fsync_path, paths))
        new = _Record(rec.keys, rec.final_keys, [*rec.ends, end], [*rec.episodes, {"meta": meta, "crc": crc}])
        _write_json_atomic(self.path / _COMMIT, new.to_json(), self._durable)
        self._rec = new
        return i

    def _create_column(self, name: str, spec: _Spec) -> _Column:
        root = zarr.open_group(store=self._zstore, mode="a", zarr_format=3)
        arr = root.create_array(
            name,
            shape=(0, *spec.shape),
            dtype=spec.dtype,
            fill_value=np.zeros((), spec.dtype).item(),
            chunk_key_encoding={"name": "default", "separator": "."},
            config=_WRITE_CONFIG,
            overwrite=True,
            **_layout(spec),
        )
        return _Column(arr, self.path / name)

    def _checked_episode(
        self, data: dict[str, np.ndarray], final: dict[str, np.ndarray] | None, meta: dict[str, Any] | None
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, Any], int]:
        if not isinstance(data, dict) or not data:
            raise ValueError("episode data must be a non-empty dict of arrays")
        data = {k: self._checked_array("data", k, v) for k, v in data.items()}
        lengths = {k: v.shape[0] if v.ndim else 0 for k, v in data.items()}
        T = next(iter(lengths.values()))
        if any(v.ndim == 0 for v in data.values()) or T < 1 or any(n != T for n in lengths.values()):
            raise ValueError(f"all data arrays need the same length T >= 1 on axis 0, got lengths {lengths}")
        final = {k: self._checked_array("final", k, v) for k, v in (final or {}).items()}
        rec = self._rec
        if rec.keys:
            self._match("data", {k: _Spec(v.dtype, v.shape[1:]) for k, v in data.items()}, rec.keys)
            self._match("final", {k: _Spec(v.dtype, v.shape) for k, v in final.items()}, rec.final_keys)
        if meta is None:
            meta = {}
        if not isinstance(meta, dict) or not all(isinstance(k, str) for k in meta):
            raise ValueError("meta must be a dict with str keys")
        try:
            meta = json.loads(json.dumps(meta))
        except (TypeError, ValueError) as e:
            raise ValueError(f"meta is not JSON-serializable: {e}") from e
        if "source" in meta and meta["source"] not in SOURCES:
            raise ValueError(f"meta['source'] must be one of {sorted(SOURCES)}, got {meta['source']!r}")
        return data, final, meta, T

    @staticmethod
    def _checked_array(group: str, key: str, v: Any) -> np.ndarray:
        if not isinstance(key, str) or not _KEY_RE.match(key):
            raise ValueError(f"{group} key {key!r} must match {_KEY_RE.pattern}")
        if not isinstance(v, np.ndarray):
            raise TypeError(f"{group}[{key!r}] must be a numpy array, got {type(v).__name__}")
        if v.dtype.kind not in "biuf":
            raise ValueError(f"{group}[{key!r}] has unsupported dtype {v.dtype} (bool, int, uint or float only)")
        return np.ascontiguousarray(v, dtype=v.dtype.newbyteorder("="))

    @staticmethod
    def _match(group: str, got: dict[str, _Spec], want: dict[str, _Spec]) -> None:
        if set(got) != set(want):
            raise ValueError(
                f"{group} keys {sorted(got)} differ from the store's {sorted(want)} "
                f"(missing {sorted(set(want) - set(got))}, extra {sorted(set(got) - set(want))})"
            )
        for k, s in got.items():
            if s != want[k]:
                raise ValueError(
                    f"{group}[{k!r}]: dtype/row shape {s.dtype}/{s.shape} != store's {want[k].dtype}/{want[k].shape}"
                )

    def _require_writer(self) -> None:
        if self.mode == "r":
            raise PermissionError(f"{self.path} is open read-only")
        if self._lock_fd is None:
            raise ValueError(f"{self.path}: store is closed")

    # ------------------------------------------------------------------ reading

    def __len__(self) -> int:
        return len(self._rec.ends)

    @property
    def n_steps(self) -> int:
        return self._rec.n_steps

    @property
    def episode_ends(self) -> np.ndarray:
        return np.asarray(self._rec.ends, dtype=np.int64)

    @property
    def keys(self) -> list[str]:
        return sorted(self._rec.keys)

    @property
    def final_keys(self) -> list[str]:
        return sorted(self._rec.final_keys)

    def episode(self, i: int, keys: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Rows of episode i, CRC-checked so damaged data raises instead of being returned."""
        i = self._index(i)
        start, end = self._bounds(i)
        out = {}
        for k in self.keys if keys is None else keys:
            name = self._data_name(k)
            with self._guard(name, f"episode {i}: "):
                x = self._col(name).arr[start:end]
            self._verify(i, name, x)
            out[k] = x
        return out

    def final(self, i: int) -> dict[str, np.ndarray]:
        i = self._index(i)
        out = {}
        for k in self.final_keys:
            name = f"final/{k}"
            with self._guard(name, f"episode {i}: "):
                x = self._col(name).arr[i : i + 1]
            self._verify(i, name, x)
            out[k] = x[0]
        return out

    def meta(self, i: int) -> dict[str, Any]:
        return copy.deepcopy(self._rec.episodes[self._index(i)]["meta"])

    def read(self, key: str, start: int, stop: int) -> np.ndarray:
        """Rows [start, stop) by global step index; never past the committed end."""
        name = self._data_name(key)
        if not 0 <= start <= stop <= self.n_steps:
            raise IndexError(f"rows [{start}, {stop}) out of the committed range [0, {self.n_steps})")
        with self._guard(name):
            return self._col(name).arr[start:stop]

    def get_rows(self, key: str, idx: np.ndarray) -> np.ndarray:
        """Random rows for batch sampling; each distinct row is read once."""
        name = self._data_name(key)
        idx = np.asarray(idx)
        if idx.dtype.kind not in "iu":
            raise TypeError(f"row indices must be integers, got {idx.dtype}")
        if idx.size and (idx.min() < 0 or idx.max() >= self.n_steps):
            raise IndexError(f"row indices must lie in the committed range [0, {self.n_steps})")
        col = self._col(name)
        if idx.size == 0:
            return np.empty((*idx.shape, *col.arr.shape[1:]), dtype=col.arr.dtype)
        rows, inverse = np.unique(idx.reshape(-1), return_inverse=True)
        with self._guard(name):
            if col.sharded:
                # zarr's orthogonal indexing is pathologically slow on sharded arrays (seconds for 256 frames);
                # concurrent single-row reads touch exactly one inner chunk each.
                got = np.empty((len(rows), *col.arr.shape[1:]), dtype=col.arr.dtype)
                sync(_read_rows(col.arr.async_array, rows, got))
            else:
                got = col.arr.oindex[rows]
        return got[inverse].reshape(*idx.shape, *col.arr.shape[1:])

    def _index(self, i: int) -> int:
        n = len(self)
        if not -n <= i < n:
            raise EpisodeIndexError(f"{self.path}: episode {i} out of range for {n} committed episode(s)")
        return i % n

    def _bounds(self, i: int) -> tuple[int, int]:
        return (self._rec.ends[i - 1] if i else 0), self._rec.ends[i]

    def _data_name(self, key: str) -> str:
        if key not in self._rec.keys:
            raise KeyError(f"{key!r} is not a data key of {self.path} (keys: {self.keys})")
        return f"data/{key}"

    def _col(self, name: str) -> _Column:
        col = self._cols.get(name)
        if col is None:
            raise StoreCorruptError(
                f"{self.path / name}: array is missing or damaged (store opened with strict=False?)"
            )
        return col

    def _verify(self, i: int, name: str, x: np.ndarray) -> None:
        if _crc(x) != self._rec.episodes[i]["crc"].get(name):
            raise StoreCorruptError(f"{self.path / name}: episode {i} fails its CRC check (damaged or missing chunk)")

    @contextmanager
    def _guard(self, name: str, where: str = "") -> Iterator[None]:
        try:
            yield
        except StoreCorruptError:
            raise
        except Exception as e:
            raise StoreCorruptError(f"{self.path / name}: {where}cannot decode committed rows: {e!r}") from e

    # ------------------------------------------------------------------ integrity

    def validate(self) -> dict[str, Any]:
        """Check every invariant, decoding every committed row; never raises for damage.

        Returns ok, problems, n_episodes, n_steps and valid_episodes (the longest intact prefix,
        which is what repair() keeps).
        """
        for name in self._rec.columns():
            self._cols[name] = self._open_column(name)
        problems = self._structure_problems()
        missing = {
            name: set(col.missing_files(col.arr.shape[0])) for name, col in self._cols.items() if col is not None
        }
        mirror = self._mirror_ends()
        bad: list[str] = []
        valid = None
        for i in range(len(self)):
            start, end = self._bounds(i)
            why = self._episode_problem(i, start, end, missing, mirror)
            if why:
                bad.append(f"episode {i}: {why}")
                valid = i if valid is None else valid
        if len(bad) > _MAX_LISTED:
            bad = bad[:_MAX_LISTED] + [f"... and {len(bad) - _MAX_LISTED} more damaged episode(s)"]
        problems += bad
        return {
            "ok": not problems,
            "problems": problems,
            "n_episodes": len(self),
            "n_steps": self.n_steps,
            "valid_episodes": len(self) if valid is None else valid,
        }

    def _mirror_ends(self) -> np.ndarray | None:
        col = self._cols.get(_ENDS)
        if col is None:
            return None
        try:
            return col.arr[: len(self)]
        except Exception:
            return None

    def _episode_problem(
        self, i: int, start: int, end: int, missing: dict[str, set[str]], mirror: np.ndarray | None
    ) -> str | None:
        if end <= start:
            return f"end {end} <= start {start}"
        if mirror is None or len(mirror) <= i or int(mirror[i]) != end:
            return f"{_ENDS} does not match the commit record"
        spans = [(f"data/{k}", start, end) for k in self._rec.keys] + [
            (f"final/{k}", i, i + 1) for k in self._rec.final_keys
        ]
        for name, lo, hi in spans:
            col = self._cols.get(name)
            if col is None:
                return f"{name} is missing or damaged"
            if col.arr.shape[0] < hi:
                return f"{name} is shorter than the commit record"
            gone = [f for f in col.files_for(lo, hi) if f in missing[name]]
            if gone:
                return f"{name} chunk file(s) {gone} missing"
            try:
                x = col.arr[lo:hi]
            except Exception as e:
                return f"{name} undecodable: {e!r}"
            if _crc(x) != self._rec.episodes[i]["crc"].get(name):
                return f"{name} fails its CRC check"
        return None

    def repair(self) -> dict[str, Any]:
        """Keep the longest intact prefix of episodes and drop the rest (record first, then data)."""
        self._require_writer()
        report = self.validate()
        keep = report["valid_episodes"]
        new = self._rec.truncated(keep)
        _write_json_atomic(self.path / _COMMIT, new.to_json(), self._durable)
        self._rec = new
        columns = new.columns()
        for name, col in list(self._cols.items()):
            if name not in columns:
                shutil.rmtree(self.path / name, ignore_errors=True)
            elif name != _ENDS and col is not None:
                col.arr.resize((columns[name][1], *col.arr.shape[1:]))
        if new.keys:  # rebuild the mirror outright: it may be the damaged part
            col = self._create_column(_ENDS, columns[_ENDS][0])
            col.arr.resize((len(new.ends),))
            col.arr[:] = np.asarray(new.ends, dtype=np.int64)
        self._load(strict=True)
        self._recover()
        if keep < report["n_episodes"]:
            _log.warning("%s: repair dropped episodes %d..%d", self.path, keep, report["n_episodes"] - 1)
        return {"kept": keep, "dropped": report["n_episodes"] - keep, "problems": report["problems"]}


async def _write_rows(jobs: list[tuple[Any, int, np.ndarray]]) -> None:
    """Grow and fill all arrays of one episode concurrently (zarr's per-call overhead dominates small writes)."""

    async def one(arr: Any, lo: int, rows: np.ndarray) -> None:
        await arr.resize((lo + len(rows), *arr.shape[1:]))
        await arr.setitem(slice(lo, lo + len(rows)), rows)

    await asyncio.gather(*(one(*job) for job in jobs))


async def _read_rows(arr: Any, rows: np.ndarray, out: np.ndarray) -> None:
    async def one(j: int, r: int) -> None:
        out[j] = (await arr.getitem(slice(r, r + 1)))[0]

    await asyncio.gather(*(one(j, int(r)) for j, r in enumerate(rows)))
