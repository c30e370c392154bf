"""Replay a stored episode: render its frames to video with an overlay, or re-execute it in the simulator."""

from __future__ import annotations

import dataclasses
import os
from fractions import Fraction
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from robot_rl.demos.store import EpisodeStore

__all__ = ["camera_keys", "compose_frames", "write_video", "render_episode", "reexecute"]

_BAND = 56  # pixels of overlay text under the cameras
_FOURCC = {".mp4": "mp4v", ".webm": "VP80", ".avi": "MJPG"}


def camera_keys(ep: dict[str, np.ndarray]) -> list[str]:
    """Per-step uint8 (T, H, W, 3) arrays are camera streams."""
    return sorted(k for k, v in ep.items() if v.dtype == np.uint8 and v.ndim == 4 and v.shape[-1] == 3)


def compose_frames(ep: dict[str, np.ndarray], min_height: int = 192) -> np.ndarray:
    """(T, H, W, 3) RGB: cameras side by side, upscaled (nearest) for legibility, with a text band."""
    cams = camera_keys(ep)
    if not cams:
        raise ValueError("episode has no camera frames to render")
    h = max(ep[c].shape[1] for c in cams)
    scale = max(1, -(-min_height // h))
    T = len(ep[cams[0]])
    out = []
    for t in range(T):
        tiles = [
            cv2.resize(ep[c][t], (ep[c].shape[2] * scale, h * scale), interpolation=cv2.INTER_NEAREST) for c in cams
        ]
        row = np.concatenate(tiles, axis=1)
        band = np.zeros((_BAND, row.shape[1], 3), np.uint8)
        frame = np.ascontiguousarray(np.concatenate([row, band], axis=0))
        _overlay(frame, ep, t, T, row.shape[0])
        out.append(frame)
    frames = np.stack(out)
    # Codecs want even sizes.
    return frames[:, : frames.shape[1] // 2 * 2, : frames.shape[2] // 2 * 2]


def _overlay(frame: np.ndarray, ep: dict[str, np.ndarray], t: int, T: int, y0: int) -> None:
    font, white, red = cv2.FONT_HERSHEY_SIMPLEX, (255, 255, 255), (255, 60, 60)
    line1 = f"step {t + 1}/{T}"
    if "reward" in ep:
        line1 += f"  reward {float(ep['reward'][t]):+.2f}"
    cv2.putText(frame, line1, (6, y0 + 20), font, 0.5, white, 1, cv2.LINE_AA)
    if "action" in ep:
        act = " ".join(f"{a:+.2f}" for a in np.asarray(ep["action"][t]).ravel())
        cv2.putText(frame, f"action {act}", (6, y0 + 44), font, 0.45, white, 1, cv2.LINE_AA)
    if "intervened" in ep and bool(ep["intervened"][t]):
        cv2.putText(frame, "INTERVENED", (frame.shape[1] - 110, y0 + 20), font, 0.5, red, 1, cv2.LINE_AA)
        cv2.rectangle(frame, (0, 0), (frame.shape[1] - 1, y0 - 1), red, 2)


def h264_available() -> bool:
    """PyAV's wheels ship libx264; opencv's do not (its mp4 writer only has mp4v, which browsers do not play)."""
    try:
        import av
    except ImportError:
        return False
    return "libx264" in av.codecs_available


def write_video(frames: np.ndarray, out: str | os.PathLike[str], fps: float = 10.0) -> None:
    """RGB frames -> video; codec by suffix (.mp4: H.264 where PyAV is installed, which every browser plays, else
    mp4v; .webm: VP8; .avi: MJPG)."""
    out = Path(out)
    fourcc = _FOURCC.get(out.suffix.lower())
    if fourcc is None:
        raise ValueError(f"unsupported video suffix {out.suffix!r}; use one of {sorted(_FOURCC)}")
    out.parent.mkdir(parents=True, exist_ok=True)
    if fourcc == "mp4v" and h264_available():
        _write_h264(frames, out, fps)
        return
    T, H, W = frames.shape[:3]
    writer = cv2.VideoWriter(str(out), cv2.VideoWriter_fourcc(*fourcc), fps, (W, H))
    if not writer.isOpened():
        raise RuntimeError(f"opencv cannot open a {fourcc} writer for {out}")
    try:
        for f in frames:
            writer.write(cv2.cvtColor(f, cv2.COLOR_RGB2BGR))
    finally:
        writer.release()


def _write_h264(frames: np.ndarray, out: Path, fps: float) -> None:
    import av

    # faststart puts the index first so a browser starts playing before the whole file has loaded.
    with av.open(str(out), "w", options={"movflags": "+faststart"}) as container:
        stream = container.add_stream("libx264", rate=Fraction(fps).limit_denominator(1000))
        stream.height, stream.width = frames.shape[1:3]
        stream.pix_fmt = "yuv420p"  # the profile browsers decode
        stream.options = {"crf": "20"}
        for f in frames:
            container.mux(stream.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(f), format="rgb24")))
        container.mux(stream.encode())


def render_episode(
    store: str | os.PathLike[str], episode: int, out: str | os.PathLike[str], fps: float = 10.0
) -> dict[str, Any]:
    with EpisodeStore(store, "r") as st:
        ep = st.episode(episode)
    frames = compose_frames(ep)
    write_video(frames, out, fps)
    return {
        "out": str(out),
        "frames": len(frames),
        "width": frames.shape[2],
        "height": frames.shape[1],
        "cameras": camera_keys(ep),
    }


def replay_env_config(meta: dict[str, Any], steps: int, yaw: bool) -> Any:
    """The env an episode ran in, state observations only: its recorded EnvConfig (any sim the factory builds,
    foreign gymnasium envs included), or for stores that predate it, the default env of its task."""
    from omegaconf import OmegaConf

    from robot_rl.sim.config import EnvConfig

    if meta.get("env"):
        recorded = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(EnvConfig), meta["env"]))
        return dataclasses.replace(recorded, obs="state", max_episode_steps=steps)
    return EnvConfig(task=meta["task"], obs="state", yaw=yaw, max_episode_steps=steps)


def reexecute(store: str | os.PathLike[str], episode: int, tol: float = 1e-4) -> dict[str, Any]:
    """Re-run the stored actions from the stored seed; report how far the proprio/state trajectory drifts.

    The env is rebuilt with obs="state" (no rendering); stored states from pixel-only stores are the
    proprio prefix of the full state, so the comparison uses the stored width.
    """
    from robot_rl.envs import make_env

    with EpisodeStore(store, "r") as st:
        meta = st.meta(episode)
        ep = st.episode(episode, [k for k in ("state", "action", "reward") if k in st.keys])
    if "seed" not in meta or ("task" not in meta and not meta.get("env")):
        raise ValueError(f"episode {episode} meta lacks 'seed'/'task'; cannot re-execute")
    actions = ep["action"]
    env = make_env(replay_env_config(meta, len(actions), yaw=actions.shape[1] == 5))
    try:
        obs, info = env.reset(seed=int(meta["seed"]))
        states, rewards, success = [], [], bool(info["success"])
        for a in actions:
            states.append(obs["state"])
            obs, r, terminated, truncated, info = env.step(a)
            rewards.append(r)
            success = bool(info["success"])
            if terminated or truncated:
                break
    finally:
        env.close()
    out: dict[str, Any] = {
        "episode": episode,
        "seed": meta["seed"],
        "steps_stored": len(actions),
        "steps_replayed": len(states),
        "success_stored": meta.get("success"),
        "success_replayed": success,
    }
    if "state" in ep:
        n = min(len(states), len(ep["state"]))
        d = ep["state"].shape[1]
        err = np.abs(np.stack(states)[:n, :d] - ep["state"][:n]).max(axis=1)
        over = np.flatnonzero(err > tol)
        out.update(max_state_error=float(err.max()), first_divergent_step=int(over[0]) if over.size else None)
    if "reward" in ep:
        n = min(len(rewards), len(ep["reward"]))
        out["max_reward_error"] = float(np.abs(np.asarray(rewards[:n]) - ep["reward"][:n]).max())
    # An operator's success label (the y / n keys) may disagree with the env's verdict on the same trajectory:
    # that is a labelling difference, not a divergence of the replay.
    operator_label = meta.get("success_label") == "operator"
    out["label_differs"] = operator_label and out["success_replayed"] != out["success_stored"]
    out["diverged"] = bool(
        out.get("first_divergent_step") is not None
        or out["steps_replayed"] != len(actions)
        or (out["success_replayed"] != out["success_stored"] and not operator_label)
    )
    return out
