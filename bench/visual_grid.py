"""A grid of PickCube scenes under the visual randomisation preset (configs/randomization/visual.yaml), for the
docs: each cell is one episode's front and wrist frames side by side, a few scripted-expert steps in so the arm is
somewhere different in each.

Run: `.venv/bin/python bench/visual_grid.py [--rows 4] [--cols 4] [--size 64] [--out PNG]`; the default PNG is
docs/img/visual_randomization.png.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import cv2
import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def grid(rows: int, cols: int, size: int, preset: str = "visual") -> np.ndarray:
    """(rows * size, cols * 2 * size, 3) RGB: episode seeds 0 .. rows * cols - 1, front | wrist in each cell."""
    from robot_rl.config import load_config
    from robot_rl.envs import make_env
    from robot_rl.sim import ScriptedExpert

    cfg = load_config([f"randomization={preset}", "obs=pixels"]).env
    env = make_env(dataclasses.replace(cfg, image_size=size), seed=0)
    cells = []
    try:
        for ep in range(rows * cols):
            obs, _ = env.reset(seed=ep)
            expert = ScriptedExpert(0.0, seed=ep)
            for _ in range(3 * (ep % 4)):
                obs, *_ = env.step(expert.act(env))
            cells.append(np.concatenate([obs[c] for c in cfg.cameras], axis=1))
    finally:
        env.close()
    return np.concatenate([np.concatenate(cells[r * cols : (r + 1) * cols], axis=1) for r in range(rows)], axis=0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=4)
    p.add_argument("--cols", type=int, default=4)
    p.add_argument("--size", type=int, default=64, help="pixels per camera frame, as the policies see them")
    p.add_argument("--preset", default="visual", help="a configs/randomization/ preset")
    p.add_argument("--out", type=Path, default=ROOT / "docs/img/visual_randomization.png")
    a = p.parse_args()
    img = grid(a.rows, a.cols, a.size, a.preset)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(a.out), cv2.cvtColor(img, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_PNG_COMPRESSION, 9])
    print(f"{a.out}: {img.shape[1]}x{img.shape[0]}, {a.out.stat().st_size // 1024} KB")


if __name__ == "__main__":
    main()
