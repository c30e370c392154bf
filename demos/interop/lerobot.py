"""Export to / import from the LeRobot dataset v3.0 format (parquet + mp4 + meta/info.json).

Layout written (one chunk, one file per stream; enough for LeRobot's loader and the Hub viewer):
  meta/info.json, meta/stats.json, meta/tasks.parquet, meta/episodes/chunk-000/file-000.parquet
  data/chunk-000/file-000.parquet              one row per frame, all episodes
  videos/<video_key>/chunk-000/file-000.mp4    one file per camera, episodes back to back
Non-image keys round-trip bit-exactly (parquet keeps dtypes); camera frames go through the mp4v codec
and come back within codec tolerance.  What LeRobot has no column for (episode meta, the final
observation, original key names and shapes) rides along in episode-table columns prefixed
"robot_rl/" and an "robot_rl" entry in info.json, which LeRobot ignores.
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

from robot_rl.demos.replay import camera_keys, write_video
from robot_rl.demos.store import EpisodeStore, staged_store

__all__ = ["export_lerobot", "import_lerobot", "lerobot_name"]

CODEBASE_VERSION = "v3.0"
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-000/file-000.parquet"
_FIXED = {"state": "observation.state", "action": "action", "reward": "next.reward", "terminated": "next.done"}
_INDEX_COLUMNS = ("timestamp", "frame_index", "episode_index", "index", "task_index")


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


def _arrow_column(x: np.ndarray) -> pa.Array:
    if x.ndim == 1:
        return pa.array(x)
    flat = x.reshape(len(x), -1)
    return pa.FixedSizeListArray.from_arrays(pa.array(flat.reshape(-1)), flat.shape[1])


def _from_arrow(col: pa.ChunkedArray, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    col = col.combine_chunks()
    if pa.types.is_fixed_size_list(col.type) or pa.types.is_list(col.type):
        values = col.flatten().to_numpy(zero_copy_only=False)
    else:
        values = col.to_numpy(zero_copy_only=False)
    return np.asarray(values, dtype=dtype).reshape(len(col), *shape)


def _stats(x: np.ndarray, video: bool) -> dict[str, Any]:
    """LeRobot normalisation stats; video stats are per channel in [0, 1] with shape (3, 1, 1)."""
    if video:
        v = x.reshape(-1, 3).astype(np.float64) / 255.0
        agg = {"min": v.min(0), "max": v.max(0), "mean": v.mean(0), "std": v.std(0)}
        return {k: val.reshape(3, 1, 1).tolist() for k, val in agg.items()} | {"count": [len(x)]}
    v = x.reshape(len(x), -1).astype(np.float64)
    return {
        "min": v.min(0).tolist(),
        "max": v.max(0).tolist(),
        "mean": v.mean(0).tolist(),
        "std": v.std(0).tolist(),
        "count": [len(x)],
    }


def export_lerobot(
    store: str | os.PathLike[str], out: str | os.PathLike[str], fps: float = 10.0, robot_type: str = "panda"
) -> dict[str, Any]:
    """Write the whole store as one LeRobot v3.0 dataset at `out` (must not exist)."""
    out = Path(out)
    if out.exists():
        raise FileExistsError(f"{out} exists; refusing to overwrite")
    with EpisodeStore(store, "r") as st:
        n = len(st)
        if n == 0:
            raise ValueError(f"{store} has no episodes to export")
        eps = [st.episode(i) for i in range(n)]
        finals = [st.final(i) for i in range(n)]
        metas = [st.meta(i) for i in range(n)]
    cams = camera_keys(eps[0])
    names = {k: lerobot_name(k, k in cams) for k in eps[0]}
    lengths = np.array([len(next(iter(e.values()))) for e in eps])
    ends = np.cumsum(lengths)
    starts = ends - lengths
    tasks: dict[str, int] = {}
    task_of = [tasks.setdefault(str(m.get("instruction") or m.get("task") or ""), len(tasks)) for m in metas]

    cat = {k: np.concatenate([e[k] for e in eps]) for k in eps[0]}
    columns: dict[str, pa.Array] = {names[k]: _arrow_column(v) for k, v in cat.items() if k not in cams}
    frame_index = np.concatenate([np.arange(t) for t in lengths]).astype(np.int64)
    columns |= {
        "timestamp": pa.array((frame_index / fps).astype(np.float32)),
        "frame_index": pa.array(frame_index),
        "episode_index": pa.array(np.repeat(np.arange(n, dtype=np.int64), lengths)),
        "index": pa.array(np.arange(int(ends[-1]), dtype=np.int64)),
        "task_index": pa.array(np.repeat(np.asarray(task_of, np.int64), lengths)),
    }
    data_file = out / DATA_PATH.format(chunk_index=0, file_index=0)
    data_file.parent.mkdir(parents=True)
    pq.write_table(pa.table(columns), data_file)

    for c in cams:
        write_video(cat[c], out / VIDEO_PATH.format(video_key=names[c], chunk_index=0, file_index=0), fps)

    ep_cols: dict[str, Any] = {
        "episode_index": np.arange(n, dtype=np.int64),
        "tasks": pa.array([[t] for t in _tasks_by_index(tasks, task_of)], pa.list_(pa.string())),
        "length": lengths.astype(np.int64),
        "data/chunk_index": np.zeros(n, np.int64),
        "data/file_index": np.zeros(n, np.int64),
        "dataset_from_index": starts.astype(np.int64),
        "dataset_to_index": ends.astype(np.int64),
        "meta/episodes/chunk_index": np.zeros(n, np.int64),
        "meta/episodes/file_index": np.zeros(n, np.int64),
        "robot_rl/meta": pa.array([json.dumps(m) for m in metas], pa.string()),
    }
    for c in cams:
        vk = names[c]
        ep_cols |= {
            f"videos/{vk}/chunk_index": np.zeros(n, np.int64),
            f"videos/{vk}/file_index": np.zeros(n, np.int64),
            f"videos/{vk}/from_timestamp": starts / fps,
            f"videos/{vk}/to_timestamp": ends / fps,
        }
    for k in finals[0]:
        ep_cols[f"robot_rl/final/{k}"] = pa.array([np.ascontiguousarray(f[k]).tobytes() for f in finals], pa.binary())
    ep_file = out / EPISODES_PATH
    ep_file.parent.mkdir(parents=True)
    pq.write_table(pa.table({k: v if isinstance(v, pa.Array) else pa.array(v) for k, v in ep_cols.items()}), ep_file)
    pq.write_table(
        pa.table(
            {"task_index": pa.array(list(tasks.values()), pa.int64()), "task": pa.array(list(tasks), pa.string())}
        ),
        out / "meta/tasks.parquet",
    )

    features: dict[str, Any] = {}
    for k, name in names.items():
        x = eps[0][k]
        if k in cams:
            h, w = x.shape[1:3]
            features[name] = {
                "dtype": "video",
                "shape": [h, w, 3],
                "names": ["height", "width", "channels"],
                "info": {
                    "video.height": h,
                    "video.width": w,
                    "video.codec": "mpeg4",
                    "video.pix_fmt": "yuv420p",
                    "video.is_depth_map": False,
                    "video.fps": fps,
                    "video.channels": 3,
                    "has_audio": False,
                },
            }
        else:
            shape = list(x.shape[1:]) or [1]
            features[name] = {"dtype": x.dtype.name, "shape": shape, "names": None}
    features |= {"timestamp": {"dtype": "float32", "shape": [1], "names": None}}
    features |= {c: {"dtype": "int64", "shape": [1], "names": None} for c in _INDEX_COLUMNS[1:]}
    info = {
        "codebase_version": CODEBASE_VERSION,
        "robot_type": robot_type,
        "total_episodes": n,
        "total_frames": int(ends[-1]),
        "total_tasks": len(tasks),
        "chunks_size": 1000,
        "data_files_size_in_mb": 100,
        "video_files_size_in_mb": 500,
        "fps": fps,
        "splits": {"train": f"0:{n}"},
        "data_path": DATA_PATH,
        "video_path": VIDEO_PATH if cams else None,
        "features": features,
        "robot_rl": {
            "keys": {
                name: {"key": k, "dtype": eps[0][k].dtype.str, "shape": list(eps[0][k].shape[1:])}
                for k, name in names.items()
            },
            "final_keys": {k: {"dtype": v.dtype.str, "shape": list(v.shape)} for k, v in finals[0].items()},
        },
    }
    (out / "meta/info.json").write_text(json.dumps(info, indent=2))
    stats = {names[k]: _stats(v, k in cams) for k, v in cat.items()}
    (out / "meta/stats.json").write_text(json.dumps(stats))
    return {"episodes": n, "frames": int(ends[-1]), "cameras": cams, "out": str(out)}


def _tasks_by_index(tasks: dict[str, int], task_of: list[int]) -> list[str]:
    names = {i: t for t, i in tasks.items()}
    return [names[i] for i in task_of]


def _read_video(path: Path) -> np.ndarray:
    cap = cv2.VideoCapture(str(path))
    if not cap.isOpened():
        raise RuntimeError(f"opencv cannot open video {path}")
    frames = []
    try:
        while True:
            ok, f = cap.read()
            if not ok:
                break
            frames.append(cv2.cvtColor(f, cv2.COLOR_BGR2RGB))
    finally:
        cap.release()
    if not frames:
        raise RuntimeError(f"{path}: no decodable frames (codec not supported by this opencv build?)")
    return np.stack(frames)


def import_lerobot(root: str | os.PathLike[str], out: str | os.PathLike[str], source: str = "teleop") -> int:
    """LeRobot v3.0 dataset at `root` -> new episode store at `out`; returns the episode count.

    Datasets exported by us come back with their original keys, dtypes, shapes, meta and final
    observations.  Foreign datasets get keys from their feature names, meta from their tasks, and
    the last frame as the final observation (LeRobot does not store the observation after the end).
    """
    root = Path(root)
    info = json.loads((root / "meta/info.json").read_text())
    if not str(info.get("codebase_version", "")).startswith("v3"):
        raise ValueError(f"{root}: codebase_version {info.get('codebase_version')!r} is not v3.x")
    fps = float(info["fps"])
    ours = info.get("robot_rl", {})
    episodes = pq.read_table(sorted((root / "meta/episodes").glob("chunk-*/file-*.parquet"))).to_pylist()
    episodes.sort(key=lambda e: e["episode_index"])
    data = pa.concat_tables([pq.read_table(p) for p in sorted((root / "data").glob("chunk-*/file-*.parquet"))])
    data = data.sort_by("index")
    index = data.column("index").to_numpy()
    spec: dict[str, tuple[str, np.dtype, tuple[int, ...]]] = {}
    for name, feat in info["features"].items():
        if name in _INDEX_COLUMNS:
            continue
        if name in ours.get("keys", {}):
            k = ours["keys"][name]
            spec[name] = (k["key"], np.dtype(k["dtype"]), tuple(k["shape"]))
        elif feat["dtype"] in ("video", "image"):
            spec[name] = (_default_key(name), np.dtype(np.uint8), tuple(feat["shape"]))
        else:
            shape = tuple(feat["shape"])
            spec[name] = (_default_key(name), np.dtype(feat["dtype"]), () if shape == (1,) else shape)
    videos: dict[tuple[str, int, int], np.ndarray] = {}
    n = 0
    with staged_store(out) as dst:  # whole or not at all: a failed import leaves no half-written store
        for e in episodes:
            lo, hi = int(e["dataset_from_index"]), int(e["dataset_to_index"])
            rows = np.searchsorted(index, np.arange(lo, hi))
            ep: dict[str, np.ndarray] = {}
            for name, (key, dtype, shape) in spec.items():
                if info["features"][name]["dtype"] == "video":
                    ep[key] = _episode_frames(root, info, e, name, videos, fps, hi - lo)
                else:
                    ep[key] = _from_arrow(data.column(name).take(rows), dtype, shape)
            if "robot_rl/meta" in e:
                meta = json.loads(e["robot_rl/meta"])
            else:
                task = (e.get("tasks") or [""])[0]
                meta = {"source": source, "task": task, "instruction": task, "length": hi - lo}
            if ours.get("final_keys"):
                final = {
                    k: np.frombuffer(e[f"robot_rl/final/{k}"], np.dtype(s["dtype"])).reshape(s["shape"]).copy()
                    for k, s in ours["final_keys"].items()
                }
            else:
                final = {key: v[-1] for key, v in ep.items() if key in _obs_keys(spec)}
            dst.add_episode(ep, meta={**meta, "imported_from": str(root)}, final=final)
            n += 1
    return n


def _obs_keys(spec: dict[str, tuple[str, np.dtype, tuple[int, ...]]]) -> set[str]:
    return {key for name, (key, _, _) in spec.items() if name.startswith("observation.")}


def _episode_frames(
    root: Path,
    info: dict[str, Any],
    e: dict[str, Any],
    name: str,
    cache: dict[tuple[str, int, int], np.ndarray],
    fps: float,
    length: int,
) -> np.ndarray:
    chunk, file = int(e[f"videos/{name}/chunk_index"]), int(e[f"videos/{name}/file_index"])
    if (name, chunk, file) not in cache:
        cache.clear()  # files are visited in order; keep one decoded file in memory
        path = root / info["video_path"].format(video_key=name, chunk_index=chunk, file_index=file)
        cache[(name, chunk, file)] = _read_video(path)
    frames = cache[(name, chunk, file)]
    first = int(round(float(e[f"videos/{name}/from_timestamp"]) * fps))
    if first + length > len(frames):
        raise ValueError(
            f"{name}: episode {e['episode_index']} needs frames [{first}, {first + length}) "
            f"but the video has {len(frames)}"
        )
    return np.ascontiguousarray(frames[first : first + length])
