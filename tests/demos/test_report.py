"""Plots and the static HTML report; the report is rendered by headless Chromium and screenshotted."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import cv2
import numpy as np
import pytest
from demos_util import robot_rl


def _png_ok(path: Path) -> np.ndarray:
    img = cv2.imread(str(path))
    assert img is not None and img.shape[0] > 100 and img.shape[1] > 100
    return img


def test_episode_and_training_plots(demo_store: Path, tmp_path: Path) -> None:
    robot_rl("plot", "episode", str(demo_store), "--episode", "1", "--out", str(tmp_path / "ep.png"))
    _png_ok(tmp_path / "ep.png")
    run = tmp_path / "run"
    run.mkdir()
    evals = [{"env_steps": s, "success_rate": r, "mean_return": r, "updates": s} for s, r in ((0, 0.0), (500, 0.4))]
    (run / "summary.json").write_text(json.dumps({"task": "PickCube", "evals": evals, "intervention_rate": 0.2}))
    robot_rl("plot", "training", str(run), "--out", str(tmp_path / "train.png"))
    _png_ok(tmp_path / "train.png")


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def test_html_report_renders_in_headless_chromium(demo_store: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    robot_rl("plot", "report", str(demo_store), "--out", str(out))
    page = (out / "index.html").read_text()
    assert "<table>" in page and 'src="dataset.png"' in page and 'src="episode.webm"' in page
    for f in ("dataset.png", "episode.png", "episode.webm"):
        assert (out / f).stat().st_size > 0
    browser = _chromium()
    if browser is None:
        pytest.skip("no Chromium on this machine (Debian: apt-get install chromium) to screenshot the report")
    shot = tmp_path / "shot.png"
    proc = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1200,1600",
            f"--screenshot={shot}",
            (out / "index.html").as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert shot.is_file(), f"chromium produced no screenshot: {proc.stderr[-2000:]}"
    img = _png_ok(shot)
    assert img.shape[:2] == (1600, 1200)
    assert img.reshape(-1, 3).std(axis=0).max() > 10  # not a blank page: tables and plots rendered
