"""Plots and the static HTML report; the report is rendered by headless Chromium and screenshotted."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import cv2
import numpy as np
import pytest
from demos_util import robot_rl

from robot_rl.demos.report import column_names
from robot_rl.demos.store import EpisodeStore


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


# Reports, for every <video> of the page, whether it decodes and plays (Chromium without a codec sets error 4).
_PROBE = """<script>setInterval(() => { document.body.dataset.videos = JSON.stringify([...document.querySelectorAll(
"video")].map(v => ({t: v.currentTime, ready: v.readyState, width: v.videoWidth, error: v.error && v.error.code})));
}, 100);</script>"""


def _chromium_run(browser: str, page: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={page.parent / '.ud'}",
         "--autoplay-policy=no-user-gesture-required", "--hide-scrollbars", *flags, page.as_uri()],
        capture_output=True, text=True, timeout=90,
    )  # fmt: skip


def test_html_report_plays_h264_names_state_fields_and_shows_every_episode(demo_store: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    robot_rl("plot", "dataset", str(demo_store), "--out", str(out), "--episodes", "0,1,2")
    page = (out / "index.html").read_text()
    videos = re.findall(r'<video src="([^"]+)"', page)
    assert videos == ["episode_000.mp4", "episode_001.mp4", "episode_002.mp4"]
    assert len(re.findall(r'<img src="episode_\d{3}.png"', page)) == 3 and "{'" not in page  # no dict reprs
    with EpisodeStore(demo_store) as st:
        layout, width = st.meta(0)["state_layout"], st.episode(0)["state"].shape[1]
    names = column_names("state", width, layout)  # what plot_episode puts in the state plot's legend
    assert {"tcp_minus_cube_start.x", "tcp_minus_cube_start.z", "gripper_opening", "cube_minus_start.y"} <= set(names)
    assert not any(n.startswith("state[") for n in names)

    browser = _chromium()
    if browser is None:
        pytest.skip("no Chromium on this machine (Debian: apt-get install chromium) to screenshot the report")
    shot = tmp_path / "shot.png"
    proc = _chromium_run(browser, out / "index.html", "--window-size=1200,1600", f"--screenshot={shot}")
    assert shot.is_file(), f"chromium produced no screenshot: {proc.stderr[-2000:]}"
    img = _png_ok(shot)
    assert img.shape[:2] == (1600, 1200)
    assert img.reshape(-1, 3).std(axis=0).max() > 10  # not a blank page: tables and plots rendered
    probe = out / "probe.html"
    probe.write_text(page.replace("</body>", _PROBE + "</body>"))
    played = [False] * 3
    for _ in range(3):  # virtual time can run out before a loaded box starts decoding: a video must play in one try
        dom = _chromium_run(browser, probe, "--virtual-time-budget=10000", "--dump-dom").stdout
        states = json.loads(html.unescape(re.search(r'data-videos="([^"]*)"', dom).group(1)))
        assert len(states) == 3
        for i, v in enumerate(states):  # decoded (H.264 in a browser) and playing
            assert v["error"] is None, states
            played[i] |= v["ready"] >= 2 and v["width"] > 0 and v["t"] > 0
        if all(played):
            break
    assert all(played), states
