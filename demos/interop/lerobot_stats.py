"""Normalisation statistics the way LeRobot 0.4 computes and merges them (lerobot/datasets/compute_stats.py).

Same keys, shapes and types: min/max in the feature's own dtype, mean/std/q01..q99 as float, count as [n];
images per channel in [0, 1] with shape (3, 1, 1) from LeRobot's frame sample. Quantiles come from the same
5000-bin histogram with linear interpolation, so numeric features give LeRobot's numbers. One deliberate
difference: LeRobot squares uint8 pixels before averaging (which wraps and zeroes image `std`); here it is float.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["QUANTILES", "STAT_KEYS", "episode_stats", "aggregate_stats"]

QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)
_Q_KEYS = tuple(f"q{int(q * 100):02d}" for q in QUANTILES)
STAT_KEYS = ("min", "max", "mean", "std", "count", *_Q_KEYS)
_BINS = 5000


def _quantiles(x: np.ndarray) -> list[np.ndarray]:
    """(N, D) -> one (D,) array per quantile, from LeRobot's RunningQuantileStats histogram."""
    lo, hi = x.min(0), x.max(0)
    out = [np.empty(x.shape[1]) for _ in QUANTILES]
    for d in range(x.shape[1]):
        edges = np.linspace(lo[d] - 1e-10, hi[d] + 1e-10, _BINS + 1)
        cum = np.cumsum(np.histogram(x[:, d], bins=edges)[0])
        for j, q in enumerate(QUANTILES):
            target = q * len(x)
            i = int(np.searchsorted(cum, target))
            if i == 0:
                out[j][d] = edges[0]
            elif i >= len(cum):
                out[j][d] = edges[-1]
            else:
                before, inside = cum[i - 1], cum[i] - cum[i - 1]
                frac = (target - before) / inside if inside else 0.0
                out[j][d] = edges[i] + frac * (edges[i + 1] - edges[i])
    return out


def _sample(n: int) -> np.ndarray:
    """LeRobot's frame sample for image stats: every frame up to 100, then ~n**0.75 evenly spaced."""
    k = n if n < 100 else max(100, min(int(n**0.75), 10_000))
    return np.round(np.linspace(0, n - 1, k)).astype(int)


def _vector_stats(x: np.ndarray) -> dict[str, Any]:
    """(N, ...) -> stats over axis 0 per element; a (N,) column keeps shape (1,) like LeRobot's keepdims."""
    shape = x.shape[1:] or (1,)
    flat = x.reshape(len(x), -1)
    f = flat.astype(np.float64)
    qs = _quantiles(f) if len(x) >= 2 else [f.mean(0)] * len(QUANTILES)
    stats = {
        "min": flat.min(0).reshape(shape),
        "max": flat.max(0).reshape(shape),
        "mean": f.mean(0).reshape(shape),
        "std": f.std(0).reshape(shape),
        "count": np.array([len(x)]),
    }
    return stats | {k: q.reshape(shape) for k, q in zip(_Q_KEYS, qs, strict=True)}


def _image_stats(frames: np.ndarray) -> dict[str, Any]:
    """(N, H, W, 3) uint8 -> per-channel stats in [0, 1], shape (3, 1, 1), count = frames sampled."""
    sample = frames[_sample(len(frames))]
    h, w = sample.shape[1:3]
    if max(h, w) >= 300:  # LeRobot's auto_downsample_height_width
        step = int(w / 150) if w > h else int(h / 150)
        sample = sample[:, ::step, ::step]
    px = sample.reshape(-1, 3).astype(np.float64)
    stats = _vector_stats(px)
    stats = {k: v / 255.0 for k, v in stats.items() if k != "count"}
    return {k: np.asarray(v, np.float64).reshape(3, 1, 1) for k, v in stats.items()} | {
        "count": np.array([len(sample)])
    }


def episode_stats(columns: dict[str, np.ndarray], images: set[str]) -> dict[str, dict[str, np.ndarray]]:
    """{feature: (T, ...) array} of one episode -> {feature: {stat: array}} in LeRobot's key order."""
    out = {}
    for name, x in columns.items():
        s = _image_stats(x) if name in images else _vector_stats(x)
        out[name] = {k: s[k] for k in STAT_KEYS}
    return out


def aggregate_stats(per_episode: list[dict[str, dict[str, np.ndarray]]]) -> dict[str, dict[str, np.ndarray]]:
    """Merge per-episode stats as LeRobot's aggregate_stats does: count-weighted means and quantiles,
    pooled variance, min of mins, max of maxes."""
    out: dict[str, dict[str, np.ndarray]] = {}
    for name in per_episode[0]:
        eps = [e[name] for e in per_episode]
        counts = np.stack([e["count"] for e in eps]).astype(np.float64)
        total = counts.sum(0)
        means = np.stack([e["mean"] for e in eps])
        w = counts.reshape(-1, *([1] * (means.ndim - 1)))
        mean = (means * w).sum(0) / total
        var = ((np.stack([e["std"] for e in eps]) ** 2 + (means - mean) ** 2) * w).sum(0) / total
        agg = {
            "min": np.min(np.stack([e["min"] for e in eps]), 0),
            "max": np.max(np.stack([e["max"] for e in eps]), 0),
            "mean": mean,
            "std": np.sqrt(var),
            "count": total.astype(np.int64),
        }
        out[name] = agg | {q: (np.stack([e[q] for e in eps]) * w).sum(0) / total for q in _Q_KEYS}
    return out
