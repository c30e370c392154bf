"""Read legacy diffusion_policy / robomimic-converted zarr v2 replay buffers (read-only) into a store.

Their layout: data/<key> (all episodes concatenated on axis 0) and meta/episode_ends.  There is no
final observation, so the last step's observation stands in for it; image codecs other than zarr's
built-ins (diffusion_policy's Jpeg2k via imagecodecs) need that package installed.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import zarr

from robot_rl.demos.store import staged_store

__all__ = ["import_legacy_zarr", "DEFAULT_RENAMES"]

# Common diffusion_policy / robomimic names -> ours.
DEFAULT_RENAMES = {
    "img": "front",
    "image": "front",
    "agentview_image": "front",
    "robot0_eye_in_hand_image": "wrist",
    "eye_in_hand_image": "wrist",
}


def _key(name: str, renames: dict[str, str]) -> str:
    return renames.get(name, re.sub(r"[^A-Za-z0-9_.\-]", "_", name))


def import_legacy_zarr(
    src: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    renames: dict[str, str] | None = None,
    source: str = "teleop",
    task: str = "",
    obs_keys: list[str] | None = None,
) -> int:
    """Copy every episode of a zarr v2 replay buffer into a new store; returns the episode count.

    obs_keys (source names): observation keys that get a final row (default: all but action/reward-like keys).
    """
    renames = DEFAULT_RENAMES if renames is None else renames
    root = zarr.open_group(store=str(Path(src)), mode="r", zarr_format=2)
    if "data" not in root or "meta" not in root or "episode_ends" not in root["meta"]:
        raise ValueError(f"{src}: not a replay buffer (needs data/ and meta/episode_ends)")
    ends = np.asarray(root["meta"]["episode_ends"][:], np.int64)
    if ends.size and (ends[0] <= 0 or np.any(np.diff(ends) <= 0)):
        raise ValueError(f"{src}: meta/episode_ends is not strictly increasing")
    arrays = dict(root["data"].arrays())
    short = {k: a.shape[0] for k, a in arrays.items() if a.shape[0] < (ends[-1] if ends.size else 0)}
    if short:
        raise ValueError(f"{src}: arrays shorter than episode_ends[-1]={ends[-1]}: {short}")
    obs = (
        set(obs_keys)
        if obs_keys is not None
        else {k for k in arrays if not re.search(r"action|reward|done|terminal", k)}
    )
    starts = np.concatenate([[0], ends[:-1]])
    with staged_store(out) as dst:  # whole or not at all: a failed import leaves no half-written store
        for i, (lo, hi) in enumerate(zip(starts, ends, strict=True)):
            data = {_key(k, renames): np.asarray(a[lo:hi]) for k, a in arrays.items()}
            final = {_key(k, renames): np.asarray(arrays[k][hi - 1]) for k in obs}
            meta = {
                "source": source,
                "task": task,
                "length": int(hi - lo),
                "legacy_episode": i,
                "imported_from": str(src),
            }
            dst.add_episode(data, meta=meta, final=final)
        return len(dst)
