"""Export to / import from the LeRobot dataset v3.0 format, as LeRobot 0.4.x itself writes it.

Layout (one chunk, one file per stream; the writer is lerobot/datasets/lerobot_dataset.py):
  meta/info.json         features with dtype / shape / names, integer fps, per-video stream info
  meta/stats.json        global stats: min, max, mean, std, count, q01, q10, q50, q90, q99
  meta/tasks.parquet     the task strings as the pandas *index*, one `task_index` column
  meta/episodes/chunk-000/file-000.parquet   per episode: tasks, length, data and video file pointers,
                         `stats/<feature>/<stat>` columns (what LeRobot's edit tools re-aggregate)
  data/chunk-000/file-000.parquet            one row per frame, all episodes
  videos/<video_key>/chunk-000/file-000.mp4  per camera, episodes back to back (AV1 or H.264, g=2, yuv420p)
Non-image keys round-trip bit-exactly (parquet keeps dtypes); camera frames go through the codec. What LeRobot
has no column for (episode meta, the final observation, original key names and shapes) rides along in
episode-table columns prefixed "robot_rl/" and a "robot_rl" entry in info.json, which LeRobot ignores.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from robot_rl.demos.interop.lerobot_stats import aggregate_stats, episode_stats
from robot_rl.demos.interop.video import decode_video, encode_video, stream_info
from robot_rl.demos.replay import camera_keys
from robot_rl.demos.store import EpisodeStore, StoreExistsError, staged_path, staged_store

__all__ = ["export_lerobot", "import_lerobot", "lerobot_name"]

CODEBASE_VERSION = "v3.0"
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-000/file-000.parquet"
TASKS_PATH = "meta/tasks.parquet"
# LeRobot's conventional names; `next.success` as in its pusht / gym datasets.
_FIXED = {
    "state": "observation.state",
    "action": "action",
    "reward": "next.reward",
    "terminated": "next.done",
    "success": "next.success",
}
_INDEX_COLUMNS = ("timestamp", "frame_index", "episode_index", "index", "task_index")
_INDEX_FEATURES = {c: {"dtype": "float32" if c == "timestamp" else "int64", "shape": [1], "names": None} for c in
                   _INDEX_COLUMNS}  # fmt: skip
_SIZES = {"chunks_size": 1000, "data_files_size_in_mb": 100, "video_files_size_in_mb": 200}  # LeRobot 0.4 defaults


def lerobot_name(key: str, is_camera: bool) -> str:
    """Our key -> LeRobot feature name (LeRobot's conventional names where one exists)."""
    if is_camera:
        return f"observation.images.{key}"
    return _FIXED.get(key, f"robot_rl.{key}")


def _default_key(name: str) -> str:
    """LeRobot feature name -> a valid store key, for datasets not exported by us."""
    for ours, theirs in _FIXED.items():
        if name == theirs:
            return ours
    for prefix in ("observation.images.", "robot_rl."):
        if name.startswith(prefix):
            name = name[len(prefix) :]
            break
    return re.sub(r"[^A-Za-z0-9_.\-]", "_", name)


# -- export ----------------------------------------------------------------------------------------------------


def _arrow_column(x: np.ndarray) -> pa.Array:
    """(N,) -> scalar column, (N, ...) -> fixed-size list of the flattened row (LeRobot's `List` of a length)."""
    if x.ndim == 1:
        return pa.array(x)
    flat = x.reshape(len(x), -1)
    return pa.FixedSizeListArray.from_arrays(pa.array(flat.reshape(-1)), flat.shape[1])


def _png_column(frames: np.ndarray) -> pa.Array:
    """(N, H, W, 3) uint8 RGB -> the struct<bytes, path> column `datasets.Image` stores, PNG-encoded."""
    png = [cv2.imencode(".png", cv2.cvtColor(f, cv2.COLOR_RGB2BGR))[1].tobytes() for f in frames]
    paths = [f"frame-{i:06d}.png" for i in range(len(frames))]
    return pa.StructArray.from_arrays([pa.array(png, pa.binary()), pa.array(paths, pa.string())], ["bytes", "path"])


def _hf_feature(feat: dict[str, Any]) -> dict[str, Any]:
    """The `huggingface` schema entry `datasets` writes for a LeRobot feature (lets the Hub viewer type columns)."""
    if feat["dtype"] == "image":
        return {"_type": "Image"}
    value = {"dtype": feat["dtype"], "_type": "Value"}
    if feat["shape"] == [1]:
        return value
    return {"feature": value, "length": feat["shape"][0], "_type": "List"}


def _tasks_table(tasks: list[str]) -> pa.Table:
    """meta/tasks.parquet as pandas writes LeRobot's DataFrame: task strings are the index, not a column."""
    pandas_meta = {
        "index_columns": ["__index_level_0__"],
        "column_indexes": [
            {
                "name": None,
                "field_name": None,
                "pandas_type": "unicode",
                "numpy_type": "str",
                "metadata": {"encoding": "UTF-8"},
            }
        ],
        "columns": [
            {
                "name": "task_index",
                "field_name": "task_index",
                "pandas_type": "int64",
                "numpy_type": "int64",
                "metadata": None,
            },
            {
                "name": None,
                "field_name": "__index_level_0__",
                "pandas_type": "object",
                "numpy_type": "str",
                "metadata": None,
            },
        ],
        "attributes": {},
        "creator": {"library": "pyarrow", "version": pa.__version__},
    }
    table = pa.table(
        {"task_index": pa.array(range(len(tasks)), pa.int64()), "__index_level_0__": pa.array(tasks, pa.large_string())}
    )
    return table.replace_schema_metadata({b"pandas": json.dumps(pandas_meta).encode()})


def _stats_columns(stats: list[dict[str, dict[str, np.ndarray]]]) -> dict[str, list[Any]]:
    """Per-episode stats -> the flat `stats/<feature>/<stat>` columns of LeRobot's episodes table."""
    return {f"stats/{name}/{k}": [e[name][k].tolist() for e in stats] for name, ks in stats[0].items() for k in ks}


def export_lerobot(
    store: str | os.PathLike[str],
    out: str | os.PathLike[str],
    fps: int = 10,
    robot_type: str | None = "panda",
    vcodec: str = "libsvtav1",
    image_keys: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Write the whole store as one LeRobot v3.0 dataset at `out` (must not exist).

    `vcodec`: libsvtav1 (AV1, LeRobot's default) or h264; both play in browsers and the Hub's dataset viewer.
    `image_keys`: cameras to store losslessly as LeRobot `image` features (PNG in the parquet) instead of video.
    """
    out = Path(out)
    if out.exists():
        raise StoreExistsError(f"{out} exists; refusing to overwrite")
    if float(fps) != int(fps) or int(fps) <= 0:
        raise ValueError(f"LeRobot stores fps as a positive integer, got {fps}")
    fps = int(fps)
    with EpisodeStore(store, "r") as st:
        n = len(st)
        if n == 0:
            raise ValueError(f"{store} has no episodes to export")
        eps = [st.episode(i) for i in range(n)]
        finals = [st.final(i) for i in range(n)]
        metas = [st.meta(i) for i in range(n)]
    cams = camera_keys(eps[0])
    # a dataset imported from LeRobot remembers its feature names, `names` and image/video choice
    known = metas[0].get("lerobot_features", {})
    names = {k: known.get(k, {}).get("name") or lerobot_name(k, k in cams) for k in eps[0]}
    as_image = {c for c in cams if c in image_keys or known.get(c, {}).get("dtype") == "image"}
    lengths = np.array([len(next(iter(e.values()))) for e in eps])
    ends = np.cumsum(lengths)
    starts = ends - lengths
    task_names: dict[str, int] = {}
    task_of = [task_names.setdefault(str(m.get("instruction") or m.get("task") or ""), len(task_names)) for m in metas]
    tasks = list(task_names)

    features: dict[str, Any] = {}
    for k, name in names.items():
        x = eps[0][k]
        if k in cams:
            kind = "image" if k in as_image else "video"
            features[name] = {"dtype": kind, "shape": list(x.shape[1:]), "names": ["height", "width", "channels"]}
        else:
            size = int(np.prod(x.shape[1:], dtype=np.int64))
            vec = x.ndim > 1
            labels = known.get(k, {}).get("names")
            if not (isinstance(labels, list) and len(labels) == size):
                labels = [f"{k}_{i}" for i in range(size)] if vec else None
            features[name] = {"dtype": x.dtype.name, "shape": [size] if vec else [1], "names": labels}
    features |= _INDEX_FEATURES

    ep_stats = []
    for i, e in enumerate(eps):
        cols = {names[k]: v for k, v in e.items()}
        cols |= {
            "timestamp": (np.arange(lengths[i]) / fps).astype(np.float32),
            "frame_index": np.arange(lengths[i], dtype=np.int64),
            "episode_index": np.full(lengths[i], i, np.int64),
            "index": np.arange(starts[i], ends[i], dtype=np.int64),
            "task_index": np.full(lengths[i], task_of[i], np.int64),
        }
        ep_stats.append(episode_stats(cols, {names[c] for c in cams}))

    cat = {k: np.concatenate([e[k] for e in eps]) for k in eps[0]}
    frame_index = np.concatenate([np.arange(t) for t in lengths]).astype(np.int64)
    columns: dict[str, pa.Array] = {}
    for k, v in cat.items():
        if k in as_image:
            columns[names[k]] = _png_column(v)
        elif k not in cams:
            columns[names[k]] = _arrow_column(v)
    columns |= {
        "timestamp": pa.array((frame_index / fps).astype(np.float32)),
        "frame_index": pa.array(frame_index),
        "episode_index": pa.array(np.repeat(np.arange(n, dtype=np.int64), lengths)),
        "index": pa.array(np.arange(int(ends[-1]), dtype=np.int64)),
        "task_index": pa.array(np.repeat(np.asarray(task_of, np.int64), lengths)),
    }
    hf = {"info": {"features": {c: _hf_feature(features[c]) for c in columns}}}
    data = pa.table(columns).replace_schema_metadata({b"huggingface": json.dumps(hf).encode()})

    with staged_path(out) as tmp:  # whole or not at all
        data_file = tmp / DATA_PATH.format(chunk_index=0, file_index=0)
        data_file.parent.mkdir(parents=True)
        pq.write_table(data, data_file, compression="snappy")
        for c in (c for c in cams if c not in as_image):
            path = tmp / VIDEO_PATH.format(video_key=names[c], chunk_index=0, file_index=0)
            encode_video(cat[c], path, fps, vcodec)
            features[names[c]]["info"] = stream_info(path)

        ep_cols: dict[str, Any] = {
            "episode_index": list(range(n)),
            "tasks": [[tasks[t]] for t in task_of],
            "length": lengths.tolist(),
            "data/chunk_index": [0] * n,
            "data/file_index": [0] * n,
            "dataset_from_index": starts.tolist(),
            "dataset_to_index": ends.tolist(),
        }
        for c in (c for c in cams if c not in as_image):
            vk = names[c]
            ep_cols |= {
                f"videos/{vk}/chunk_index": [0] * n,
                f"videos/{vk}/file_index": [0] * n,
                f"videos/{vk}/from_timestamp": (starts / fps).tolist(),
                f"videos/{vk}/to_timestamp": (ends / fps).tolist(),
            }
        ep_cols |= _stats_columns(ep_stats)
        ep_cols |= {"meta/episodes/chunk_index": [0] * n, "meta/episodes/file_index": [0] * n}
        ep_cols["robot_rl/meta"] = [json.dumps(m) for m in metas]
        ep_table = pa.Table.from_pydict(ep_cols)
        for k in finals[0]:
            col = pa.array([np.ascontiguousarray(f[k]).tobytes() for f in finals], pa.binary())
            ep_table = ep_table.append_column(f"robot_rl/final/{k}", col)
        (tmp / EPISODES_PATH).parent.mkdir(parents=True)
        pq.write_table(ep_table, tmp / EPISODES_PATH, compression="snappy")
        pq.write_table(_tasks_table(tasks), tmp / TASKS_PATH)

        info = {
            "codebase_version": CODEBASE_VERSION,
            "robot_type": robot_type or None,
            "total_episodes": n,
            "total_frames": int(ends[-1]),
            "total_tasks": len(tasks),
            **_SIZES,
            "fps": fps,
            "splits": {"train": f"0:{n}"},
            "data_path": DATA_PATH,
            "video_path": VIDEO_PATH if set(cams) - as_image else None,
            "features": features,
            "robot_rl": {
                "keys": {
                    name: {"key": k, "dtype": eps[0][k].dtype.str, "shape": list(eps[0][k].shape[1:])}
                    for k, name in names.items()
                },
                "final_keys": {k: {"dtype": v.dtype.str, "shape": list(v.shape)} for k, v in finals[0].items()},
            },
        }
        stats = {name: {k: v.tolist() for k, v in s.items()} for name, s in aggregate_stats(ep_stats).items()}
        (tmp / "meta/info.json").write_text(json.dumps(info, indent=4))
        (tmp / "meta/stats.json").write_text(json.dumps(stats, indent=4))
    return {"episodes": n, "frames": int(ends[-1]), "cameras": cams, "vcodec": vcodec, "out": str(out)}


# -- import ----------------------------------------------------------------------------------------------------


def _from_arrow(col: pa.ChunkedArray, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    col = col.combine_chunks()
    if pa.types.is_fixed_size_list(col.type) or pa.types.is_list(col.type) or pa.types.is_large_list(col.type):
        values = col.flatten().to_numpy(zero_copy_only=False)
    else:
        values = col.to_numpy(zero_copy_only=False)
    return np.asarray(values, dtype=dtype).reshape(len(col), *shape)


def _decode_images(col: pa.ChunkedArray, root: Path, name: str) -> np.ndarray:
    """An `image` feature column (struct of PNG/JPEG bytes and a path) -> (T, H, W, 3) uint8 RGB."""
    frames = []
    for cell in col.to_pylist():
        raw = cell.get("bytes") if isinstance(cell, dict) else None
        if raw is None and isinstance(cell, dict) and cell.get("path"):
            raw = (root / cell["path"]).read_bytes()
        if raw is None:
            raise ValueError(f"{name}: an image cell holds neither bytes nor a readable path")
        bgr = cv2.imdecode(np.frombuffer(raw, np.uint8), cv2.IMREAD_COLOR)
        if bgr is None:
            raise ValueError(f"{name}: an image cell is not a decodable image")
        frames.append(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB))
    return np.stack(frames)


def _read_tasks(root: Path) -> dict[int, str]:
    """meta/tasks.parquet -> {task_index: task}; LeRobot keeps the strings in the pandas index (older exports of
    ours in a `task` column)."""
    table = pq.read_table(root / TASKS_PATH)
    if "task" in table.column_names:
        strings = table.column("task").to_pylist()
    else:
        index = json.loads((table.schema.metadata or {}).get(b"pandas", b"{}")).get("index_columns", [])
        names = [c for c in index if isinstance(c, str) and c in table.column_names]
        if not names:
            raise ValueError(f"{root / TASKS_PATH}: no task strings (neither a `task` column nor a pandas index)")
        strings = table.column(names[0]).to_pylist()
    return dict(zip(table.column("task_index").to_pylist(), map(str, strings), strict=True))


def _episode_frames(
    root: Path, info: dict[str, Any], e: dict[str, Any], name: str, cache: dict[str, Any], fps: float, length: int
) -> np.ndarray:
    """The episode's frames out of its (possibly shared) video file, picked by presentation time: the stream,
    not info.json, says what the file holds."""
    chunk, file = int(e[f"videos/{name}/chunk_index"]), int(e[f"videos/{name}/file_index"])
    if cache.get(name, (None,))[0] != (chunk, file):
        path = root / info["video_path"].format(video_key=name, chunk_index=chunk, file_index=file)
        cache[name] = ((chunk, file), *decode_video(path))
    _, times, frames = cache[name]
    want = float(e[f"videos/{name}/from_timestamp"]) + np.arange(length) / fps
    idx = np.clip(np.searchsorted(times, want - 0.5 / fps), 0, len(times) - 1)
    off = np.abs(times[idx] - want)
    if np.any(off >= 0.5 / fps):
        bad = int(np.argmax(off >= 0.5 / fps))
        raise ValueError(
            f"{name}: episode {e['episode_index']} frame {bad} (t={want[bad]:.3f}s) is not in the video "
            f"(it spans {times[0]:.3f}..{times[-1]:.3f}s)"
        )
    return np.ascontiguousarray(frames[idx])


def _plan(root: Path) -> tuple[dict[str, Any], list[dict[str, Any]], dict[int, str], dict[str, tuple], list[str]]:
    """Read and check the meta before anything is written: (info, episodes, tasks, spec, dropped features)."""
    info_path = root / "meta/info.json"
    if not info_path.is_file():
        raise FileNotFoundError(f"{root}: no meta/info.json; not a LeRobot dataset")
    info = json.loads(info_path.read_text())
    if not str(info.get("codebase_version", "")).startswith("v3"):
        raise ValueError(f"{root}: codebase_version {info.get('codebase_version')!r} is not v3.x")
    ep_files = sorted((root / "meta/episodes").glob("chunk-*/file-*.parquet"))
    data_files = sorted((root / "data").glob("chunk-*/file-*.parquet"))
    if not ep_files or not data_files:
        raise FileNotFoundError(f"{root}: missing meta/episodes or data parquet files")
    episodes = pq.read_table(ep_files).to_pylist()
    episodes.sort(key=lambda e: e["episode_index"])
    tasks = _read_tasks(root)
    ours = info.get("robot_rl", {})
    spec: dict[str, tuple[str, np.dtype, tuple[int, ...], str]] = {}
    dropped = []
    for name, feat in info["features"].items():
        kind = feat["dtype"]
        if name in _INDEX_COLUMNS:
            continue
        if name in ours.get("keys", {}):
            k = ours["keys"][name]
            spec[name] = (k["key"], np.dtype(k["dtype"]), tuple(k["shape"]), kind)
        elif kind in ("video", "image"):
            spec[name] = (_default_key(name), np.dtype(np.uint8), tuple(feat["shape"]), kind)
        elif kind in ("string", "str"):
            dropped.append(name)  # the store holds numbers only
        else:
            shape = tuple(feat["shape"])
            spec[name] = (_default_key(name), np.dtype(kind), () if shape == (1,) else shape, kind)
    keys = [s[0] for s in spec.values()]
    if len(set(keys)) != len(keys):
        raise ValueError(f"{root}: features map to clashing store keys {sorted(keys)}")
    schema = pq.read_schema(data_files[0])
    missing = [n for n, s in spec.items() if s[3] != "video" and n not in schema.names]
    missing += [c for c in ("index", "task_index") if c not in schema.names]
    if missing:
        raise ValueError(f"{root}: features {missing} have no column in {data_files[0].name}")
    for e in episodes:
        for name, s in spec.items():
            if s[3] == "video":
                path = root / info["video_path"].format(
                    video_key=name,
                    chunk_index=int(e[f"videos/{name}/chunk_index"]),
                    file_index=int(e[f"videos/{name}/file_index"]),
                )
                if not path.is_file():
                    raise FileNotFoundError(f"{root}: episode {e['episode_index']} needs {path}, which is missing")
    return info, episodes, tasks, spec, dropped


def _success(ep: dict[str, np.ndarray]) -> tuple[bool | None, str]:
    """Episode success from what the data holds: a success flag, else a sparse 0/1 reward that reached 1."""
    if "success" in ep:
        return bool(np.any(ep["success"])), "next.success"
    r = ep.get("reward")
    if r is not None and np.all(np.isin(r, (0, 1))):
        return bool(np.any(r == 1)), "next.reward (sparse 0/1)"
    return None, "unknown: no next.success and next.reward is not a sparse 0/1 reward"


def import_lerobot(root: str | os.PathLike[str], out: str | os.PathLike[str], source: str = "teleop") -> dict[str, Any]:
    """LeRobot v3.0 dataset at `root` -> new episode store at `out` (must not exist); returns a summary.

    Datasets exported by us come back with their original keys, dtypes, shapes, meta and final observations.
    Foreign datasets get keys from their feature names, meta from their tasks and per-episode stats, success
    where the data allows (the summary says from what), and the last frame as the final observation (LeRobot
    does not store the observation after the end). Everything is checked first and written to a temporary
    store renamed into place at the end: a failed import leaves nothing behind.
    """
    root, out = Path(root), Path(out)
    if out.exists():
        raise StoreExistsError(f"{out} exists; import into a new store")
    info, episodes, tasks, spec, dropped = _plan(root)
    fps = float(info["fps"])
    ours = info.get("robot_rl", {})
    data = pa.concat_tables([pq.read_table(p) for p in sorted((root / "data").glob("chunk-*/file-*.parquet"))])
    data = data.sort_by("index")
    index = data.column("index").to_numpy()
    videos: dict[str, Any] = {}
    success_from: set[str] = set()
    with staged_store(out) as dst:  # whole or not at all: a failed import leaves nothing behind
        for e in episodes:
            lo, hi = int(e["dataset_from_index"]), int(e["dataset_to_index"])
            rows = np.searchsorted(index, np.arange(lo, hi))
            if np.any(rows >= len(index)) or not np.array_equal(index[np.minimum(rows, len(index) - 1)],
                                                               np.arange(lo, hi)):  # fmt: skip
                raise ValueError(f"{root}: episode {e['episode_index']} rows [{lo}, {hi}) are not all in data/")
            ep: dict[str, np.ndarray] = {}
            for name, (key, dtype, shape, kind) in spec.items():
                if kind == "video":
                    ep[key] = _episode_frames(root, info, e, name, videos, fps, hi - lo)
                elif kind == "image":
                    ep[key] = _decode_images(data.column(name).take(rows), root, name)
                else:
                    ep[key] = _from_arrow(data.column(name).take(rows), dtype, shape)
            if "robot_rl/meta" in e:
                meta = json.loads(e["robot_rl/meta"])
            else:
                frame_tasks = [tasks[int(t)] for t in data.column("task_index").take(rows).to_pylist()]
                ep_tasks = list(dict.fromkeys(e.get("tasks") or frame_tasks))
                meta = {"source": source, "task": frame_tasks[0], "instruction": frame_tasks[0], "length": hi - lo}
                meta |= {"tasks": ep_tasks} if len(ep_tasks) > 1 else {}
                success, how = _success(ep)
                success_from.add(how)
                if success is not None:
                    meta["success"] = success
                stats: dict[str, dict[str, Any]] = {}
                for col, v in e.items():
                    if col.startswith("stats/") and v is not None:
                        feature, stat = col[len("stats/") :].rsplit("/", 1)
                        stats.setdefault(feature, {})[stat] = v
                meta["lerobot_stats"] = stats
                meta["lerobot_features"] = {
                    key: {"name": name, "dtype": kind, "names": info["features"][name].get("names")}
                    for name, (key, _, _, kind) in spec.items()
                }
            if ours.get("final_keys"):
                final = {
                    k: np.frombuffer(e[f"robot_rl/final/{k}"], np.dtype(s["dtype"])).reshape(s["shape"]).copy()
                    for k, s in ours["final_keys"].items()
                }
            else:
                obs_keys = {key for name, (key, *_) in spec.items() if name.startswith("observation.")}
                final = {key: v[-1] for key, v in ep.items() if key in obs_keys}
            dst.add_episode(ep, meta={**meta, "imported_from": str(root)}, final=final)
    summary: dict[str, Any] = {"episodes": len(episodes), "frames": int(len(index)), "out": str(out)}
    summary["keys"] = {name: s[0] for name, s in spec.items()}
    if dropped:
        summary["dropped"] = dropped
    if success_from:
        summary["success_from"] = sorted(success_from)
    return summary
