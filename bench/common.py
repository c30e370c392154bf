"""Shared bench helpers: wall and CPU rates from the same run, percentiles, one row format; the run file every area
writes (`write_run`) and the check that a kept stage was made with the same parameters (`reusable`, `record`)."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.evaluation import wilson  # noqa: F401 (the benches' `from common import wilson`)


def rates(fn: Callable[[], object], reps: int, warmup: int = 2) -> tuple[float, float]:
    """(calls per wall-second, calls per CPU-second of this process, all threads counted)."""
    for _ in range(warmup):
        fn()
    w, c = time.perf_counter(), time.process_time()
    for _ in range(reps):
        fn()
    return reps / (time.perf_counter() - w), reps / max(time.process_time() - c, 1e-9)


def latency_ms(fn: Callable[[], object], reps: int, warmup: int = 10) -> tuple[float, float]:
    """(p50, p99) in milliseconds."""
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(1e3 * (time.perf_counter() - t))
    return float(np.percentile(ts, 50)), float(np.percentile(ts, 99))


def kept_ci(nominal: list[bool], shifted: list[bool], n_boot: int = 4000, seed: int = 0) -> tuple[float, float]:
    """Bootstrap 95 % CI of shifted/nominal success, resampling the two sets of episodes independently."""
    rng = np.random.default_rng(seed)
    a, b = np.asarray(nominal, float), np.asarray(shifted, float)
    num = b[rng.integers(0, len(b), (n_boot, len(b)))].mean(1)
    den = a[rng.integers(0, len(a), (n_boot, len(a)))].mean(1)
    ratio = num / np.maximum(den, 1e-9)
    return (float(np.quantile(ratio, 0.025)), float(np.quantile(ratio, 0.975)))


def cli(*args: str, timeout: float | None = None) -> str:
    """A `robot-rl` command as its own process; its stdout, or the tail of its stderr on failure."""
    p = subprocess.run([sys.executable, "-m", "robot_rl.cli", *args], capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"robot-rl {args[0]} failed ({p.returncode}): {p.stderr[-3000:]}")
    return p.stdout


def episodes(successes: list[bool], first_seed: int) -> list[dict]:
    """Per-episode outcomes as a row's `per_episode` (episode i ran on seed `first_seed + i`): `write_run` moves
    them out of the table into the run file's `raw`, so a rate in the docs can be recounted from its episodes."""
    return [{"seed": first_seed + i, "success": bool(s)} for i, s in enumerate(successes)]


def _git(*args: str) -> str:
    p = subprocess.run(["git", *args], capture_output=True, text=True, cwd=Path(__file__).resolve().parent)
    return p.stdout.strip() if p.returncode == 0 else ""


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def provenance() -> dict[str, Any]:
    """What a number depends on besides the code's arguments: versions, the commit (and whether the tree differed
    from it), and the box."""
    import torch

    try:
        import mujoco

        mj = mujoco.__version__
    except ImportError:
        mj = None
    cuda = torch.cuda.is_available()
    return {
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "mujoco": mj,
            "numpy": np.__version__,
            "robot_rl_commit": _git("rev-parse", "HEAD") or None,
            "robot_rl_dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
        },
        "box": {
            "cpu": _cpu_model(),
            "cores": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "gpu": torch.cuda.get_device_name() if cuda else None,
            "host": platform.node(),
        },
    }


def run_name(tag: str, when: float | None = None) -> str:
    """`<run>` of `bench/results/<area>/<run>.json`: a local timestamp and a short tag (`20261205-141500-quick`)."""
    return time.strftime("%Y%m%d-%H%M%S", time.localtime(when)) + (f"-{tag}" if tag else "")


def write_run(out: Path, area: str, run: str, params: dict, rows: list[dict], started: float, duration_s: float,
              prov: dict | None = None) -> Path:  # fmt: skip
    """`out/<area>/<run>.json`: the area, the parameters it ran with, versions, box, start and duration, the rows it
    printed and (from each row's `per_episode`, taken out of the row) the raw per-episode outcomes."""
    table, raw = [], {}
    for r in rows:
        r = dict(r)
        if "per_episode" in r:
            raw[str(r.get("bench", len(raw)))] = r.pop("per_episode")
        table.append(r)
    doc = {
        "area": area,
        "run": run,
        "params": params,
        **(prov or provenance()),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "duration_s": round(duration_s, 1),
        "rows": table,
        "raw": raw,
    }
    path = out / area / f"{run}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    tmp.replace(path)
    return path


def _params_path(output: Path) -> Path:
    return output.with_name(output.name + ".params.json")


def _normal(params: dict) -> dict:
    return json.loads(json.dumps(params, default=str))


def reusable(output: Path, params: dict, what: str) -> bool:
    """Whether a bench stage's finished `output` (a file or folder) was made with `params`, recorded beside it as
    `<output>.params.json` by `record`. When not (other parameters, or none recorded), the old output is removed so
    the stage runs again, and one line on stderr says why."""
    if not output.exists():
        return False
    pp = _params_path(output)
    old = json.loads(pp.read_text()) if pp.exists() else None
    if old == _normal(params):
        return True
    if old is None:
        why = "no parameters recorded"
    else:
        new = _normal(params)
        why = "changed: " + ", ".join(sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k)))
    print(f"[bench] redoing {what} ({output.name}): {why}", file=sys.stderr, flush=True)
    if output.is_dir():
        shutil.rmtree(output)
    else:
        output.unlink()
    pp.unlink(missing_ok=True)
    return False


def record(output: Path, params: dict) -> None:
    """Note that `output` was made with `params` (see `reusable`); call it once the stage has finished."""
    _params_path(output).write_text(json.dumps(_normal(params), indent=1, sort_keys=True) + "\n")


def synthetic_episode(n: int, cams: int, hw: int = 128, seed: int = 0) -> list:
    """Consecutive transitions sharing frames as an Actor produces them (obs[t+1] is next_obs[t]): random state,
    `cams` random `hw` x `hw` frames, random actions (the transport benches' payload)."""
    from robot_rl.types import Transition

    rng = np.random.default_rng(seed)

    def obs() -> dict[str, np.ndarray]:
        o = {"state": rng.standard_normal(13).astype(np.float32)}
        o.update({f"c{i}": rng.integers(0, 256, (hw, hw, 3), dtype=np.uint8) for i in range(cams)})
        return o

    cur, out = obs(), []
    for _ in range(n):
        nxt = obs()
        out.append(Transition(cur, rng.uniform(-1, 1, 4).astype(np.float32), 0.0, nxt, False, False))
        cur = nxt
    return out
