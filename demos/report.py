"""Plots (matplotlib Agg -> PNG) and a static HTML report for a dataset; no server, opens from disk."""

from __future__ import annotations

import html
import json
import os
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (backend must be chosen first)
import numpy as np  # noqa: E402

from robot_rl.demos.dataset import info  # noqa: E402
from robot_rl.demos.replay import camera_keys, compose_frames, h264_available, write_video  # noqa: E402
from robot_rl.demos.store import EpisodeStore  # noqa: E402
from robot_rl.errors import UserError  # noqa: E402

__all__ = ["plot_episode", "plot_training", "plot_dataset", "html_report", "plot_stored_episode"]


def _shade(ax: Any, flags: np.ndarray) -> None:
    for t in np.flatnonzero(flags):
        ax.axvspan(t - 0.5, t + 0.5, color="tab:red", alpha=0.12, lw=0)


def column_names(key: str, width: int, layout: dict[str, list[int]] | None = None) -> list[str]:
    """Names of a per-step array's columns: state fields from the episode's `state_layout` meta (tcp_pos.x,
    gripper_opening, ...), the action convention, else key[i]."""
    if key == "state" and layout:
        names = [f"state[{j}]" for j in range(width)]
        for field, (lo, hi) in layout.items():
            for j in range(lo, min(hi, width)):
                names[j] = field + (f".{'xyz'[j - lo]}" if hi - lo == 3 else f"[{j - lo}]" if hi - lo > 1 else "")
        return names
    if key == "action" and width in (4, 5):
        return ["dx", "dy", "dz", *(["dyaw"] if width == 5 else []), "gripper"]
    return [f"{key}[{j}]" for j in range(width)]


def plot_episode(
    ep: dict[str, np.ndarray], out: str | os.PathLike[str], title: str = "", layout: dict[str, list[int]] | None = None
) -> Path:
    """Action and proprio/state traces over time, columns by name; intervened steps shaded red."""
    keys = [k for k in ("action", "state") if k in ep]
    fig, axes = plt.subplots(len(keys), 1, figsize=(8, 2.6 * len(keys)), sharex=True, squeeze=False)
    for ax, k in zip(axes[:, 0], keys, strict=True):
        x = ep[k].reshape(len(ep[k]), -1)
        for j, name in enumerate(column_names(k, x.shape[1], layout)):
            ax.plot(x[:, j], lw=1, label=name)
        if "intervened" in ep:
            _shade(ax, ep["intervened"])
        ax.set_ylabel(k)
        ax.legend(fontsize=6, ncol=min(6, x.shape[1]), loc="upper right")
    axes[-1, 0].set_xlabel("step")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=80)
    plt.close(fig)
    return Path(out)


def plot_stored_episode(store: str | os.PathLike[str], episode: int, out: str | os.PathLike[str]) -> Path:
    """`plot_episode` of episode `episode` of the store at `store`, its state columns named from its meta."""
    with EpisodeStore(store, "r") as st:
        ep, layout = st.episode(episode), st.meta(episode).get("state_layout")
    return plot_episode(ep, out, f"episode {episode}", layout)


def plot_training(run_dir: str | os.PathLike[str], out: str | os.PathLike[str]) -> Path:
    """Success rate, mean return and intervention rate vs env steps from a run's summary.json, or from the
    evals.jsonl it appends while it runs (an unfinished run is plotted as far as it got). `out` may be a folder."""
    run_dir = Path(run_dir)
    summary_path, log = run_dir / "summary.json", run_dir / "evals.jsonl"
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
    evals = summary.get("evals") or ([json.loads(x) for x in log.read_text().splitlines() if x.strip()]
                                     if log.is_file() else [])  # fmt: skip
    if not evals:
        raise UserError(f"{run_dir}: no evaluations to plot yet (neither summary.json nor evals.jsonl has any)")
    if not summary:
        print(f"note: {run_dir} is unfinished: plotting its {len(evals)} evaluation(s) so far", file=sys.stderr)
    out = Path(out) / "training.png" if Path(out).is_dir() or str(out).endswith(os.sep) else Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    steps = [e["env_steps"] for e in evals]
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.2))
    axes[0].plot(steps, [e["success_rate"] for e in evals], marker="o", label="as trained")
    if all("nominal_success_rate" in e for e in evals):  # a randomised run, judged on the nominal scene
        axes[0].plot(steps, [e["nominal_success_rate"] for e in evals], marker="s", label="nominal scene")
        axes[0].legend()
    axes[0].set_ylim(-0.05, 1.05)
    axes[0].set_title("eval success rate")
    axes[1].plot(steps, [e["mean_return"] for e in evals], marker="o", color="tab:green")
    axes[1].set_title("eval mean return")
    axes[2].set_title("intervention rate")
    if all("intervention_rate" in e for e in evals):
        axes[2].plot(steps, [e["intervention_rate"] for e in evals], marker="o", color="tab:red")
        axes[2].set_ylim(-0.05, 1.05)
    else:  # only the run-wide rate is recorded: a number, not a flat line on a made-up axis
        rate = summary.get("intervention_rate")
        axes[2].text(0.5, 0.5, f"{rate:.1%} of env steps\n(whole run)" if rate is not None else "not recorded",
                     ha="center", va="center", fontsize=14, transform=axes[2].transAxes)  # fmt: skip
        axes[2].set_axis_off()
    for ax in axes[:2]:
        ax.set_xlabel("env steps")
    fig.suptitle(f"{summary.get('task', '')} {summary.get('obs', '')} seed {summary.get('seed', '')}")
    fig.tight_layout()
    fig.savefig(out, dpi=80)
    plt.close(fig)
    return Path(out)


def plot_dataset(metas: list[dict[str, Any]], out: str | os.PathLike[str]) -> Path:
    """Per-episode length, cumulative success rate and intervention rate across the dataset."""
    n = np.arange(len(metas))
    lengths = np.array([m.get("length", 0) for m in metas], float)
    succ = np.array([bool(m.get("success")) for m in metas], float)
    interv = np.array([m.get("intervened_steps", 0) for m in metas], float) / np.maximum(lengths, 1)
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.0))
    axes[0].bar(n, lengths)
    axes[0].set_title("episode length")
    axes[1].plot(n, np.cumsum(succ) / (n + 1), marker=".")
    axes[1].set_ylim(-0.05, 1.05)
    axes[1].set_title("cumulative success rate")
    axes[2].bar(n, interv, color="tab:red")
    axes[2].set_ylim(0, 1.05)
    axes[2].set_title("intervention rate")
    for ax in axes:
        ax.set_xlabel("episode")
    fig.tight_layout()
    fig.savefig(out, dpi=80)
    plt.close(fig)
    return Path(out)


def html_report(
    store: str | os.PathLike[str], out_dir: str | os.PathLike[str], episodes: list[int] | None = None
) -> Path:
    """out_dir/index.html: summary and key tables, dataset plots, and for every episode (or the chosen ones) its
    traces and a video (H.264 mp4 where PyAV is installed, else WebM), then the per-episode table."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = info(store)
    with EpisodeStore(store, "r") as st:
        metas = [st.meta(i) for i in range(len(st))]
        if episodes is None:
            chosen = list(range(len(st)))
        else:
            for i in episodes:
                st.meta(i)  # an episode past the store fails here, naming it
            chosen = [i % len(st) for i in episodes]
    plot_dataset(metas, out_dir / "dataset.png")
    parts = [
        f"<h1>Dataset {html.escape(str(store))}</h1>",
        "<h2>Summary</h2>",
        _table(
            ["property", "value"],
            [
                [k, summary[k]]
                for k in (
                    "n_episodes",
                    "n_steps",
                    "success_rate",
                    "sources",
                    "tasks",
                    "length",
                    "disk_bytes",
                    "raw_bytes",
                    "compression_ratio",
                )
            ],
        ),
    ]
    parts += [
        "<h2>Keys</h2>",
        _table(["key", "dtype", "shape"], [[k, v["dtype"], v["shape"]] for k, v in summary["keys"].items()]),
    ]
    parts += ['<h2>Episodes</h2><img src="dataset.png" alt="dataset plots">']
    suffix = ".mp4" if h264_available() else ".webm"
    for i in chosen:
        with EpisodeStore(store, "r") as st:
            ep = st.episode(i)
        m = metas[i]
        plot_episode(ep, out_dir / f"episode_{i:03d}.png", f"episode {i}", m.get("state_layout"))
        verdict = "success" if m.get("success") else "no success"
        parts += [f"<h2>Episode {i}: {m.get('length')} steps, {verdict}</h2>",
                  f'<img src="episode_{i:03d}.png" alt="episode {i} traces">']  # fmt: skip
        if camera_keys(ep):
            video = f"episode_{i:03d}{suffix}"
            write_video(compose_frames(ep), out_dir / video)
            parts.append(f'<video src="{video}" controls loop muted autoplay playsinline></video>')
    parts += [
        _table(
            ["episode", "length", "success", "source", "return", "intervened", "instruction"],
            [
                [
                    i,
                    m.get("length"),
                    m.get("success"),
                    m.get("source"),
                    _num(m.get("return")),
                    m.get("intervened_steps"),
                    m.get("instruction", ""),
                ]
                for i, m in enumerate(metas)
            ],
        )
    ]
    page = (
        "<!doctype html><html><head><meta charset='utf-8'><title>dataset report</title><style>"
        "body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse;margin:.5em 0}"
        "td,th{border:1px solid #bbb;padding:2px 8px;font-size:13px}img,video{max-width:100%}"
        "</style></head><body>" + "\n".join(parts) + "</body></html>"
    )
    index = out_dir / "index.html"
    index.write_text(page)
    return index


def _num(x: Any) -> Any:
    """A table cell as a person reads it: rounded floats, `a: 1, b: 2` instead of a Python dict repr."""
    if isinstance(x, dict):
        return ", ".join(f"{k}: {_num(v)}" for k, v in x.items())
    if isinstance(x, list):
        return " x ".join(map(str, x)) if all(isinstance(v, int) for v in x) else ", ".join(map(str, x))
    return round(x, 3) if isinstance(x, float) else x


def _table(header: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(_num(c)))}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"
