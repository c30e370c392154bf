"""`bench/gpu_check.sh --tiny`: the prepared GPU check runs end to end on a CPU at toy sizes, so the one call a
GPU session gets is not its first run."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_gpu_check_runs_every_section_on_cpu(tmp_path: Path) -> None:
    out = tmp_path / "gpu_check.json"
    env = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl"), "TMPDIR": str(tmp_path)}
    p = subprocess.run(["bash", "bench/gpu_check.sh", "--tiny", "--out", str(out)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    assert not list(tmp_path.glob("gpu_check_*"))  # its runs' folders (1.7 GB at full size) are removed
    r = json.loads(out.read_text())
    for section in ("env", "learner", "vla", "maniskill", "main_job", "pixel_job"):
        assert "error" not in r[section], r[section]
    rows = r["learner"]["rows"]
    assert len(rows) == 12 and all(x["critic_updates_per_s"] > 0 for x in rows)
    assert r["vla"]["all_bf16"], r["vla"]  # an outer bf16 autocast reaches every base matmul
    ms = r["maniskill"]
    assert "skipped" in ms or (ms["env_steps_per_s"] > 0 and ms["training"]["env_steps"] == 120)
    assert r["main_job"]["env_steps"] == 150 and r["pixel_job"]["env_steps"] == 100
    assert len(r["goals"]) == 4 and all(g["met"] is None for g in r["goals"].values())  # toy sizes judge nothing
