"""Video files with PyAV, the way LeRobot writes and reads them.

PyAV, not OpenCV: LeRobot encodes AV1 (libsvtav1) by default, which opencv builds often cannot decode, and the
PyAV wheels bundle the encoders LeRobot uses (libsvtav1, libx264) so the codec choices can be copied exactly.
"""

from __future__ import annotations

import logging
import os
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

__all__ = ["VCODECS", "encode_video", "decode_video", "stream_info"]

# LeRobot's encode_video_frames: every codec at g=2 (a keyframe every other frame, so random access decodes at
# most one extra frame) and crf=30 in yuv420p; SVT-AV1 at its fastest preset.
VCODECS = {"libsvtav1": {"g": "2", "crf": "30", "preset": "12"}, "h264": {"g": "2", "crf": "30"}}
PIX_FMT = "yuv420p"

logging.getLogger("libav").setLevel(logging.ERROR)
os.environ.setdefault("SVT_LOG", "1")  # SVT-AV1 prints its whole config to stderr per encoder otherwise


def encode_video(frames: np.ndarray, path: str | os.PathLike[str], fps: int, vcodec: str = "libsvtav1") -> None:
    """(T, H, W, 3) uint8 RGB -> mp4 at `path`, frame t at pts t/fps."""
    if vcodec not in VCODECS:
        raise ValueError(f"vcodec {vcodec!r} is not one LeRobot writes; use one of {sorted(VCODECS)}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    T, H, W = frames.shape[:3]
    with av.open(str(path), "w") as out:
        stream = out.add_stream(vcodec, rate=fps, options=dict(VCODECS[vcodec]))
        stream.pix_fmt, stream.width, stream.height = PIX_FMT, W, H
        stream.time_base = Fraction(1, fps)
        for t in range(T):
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(frames[t]), format="rgb24")
            frame.pts = t
            out.mux(stream.encode(frame))
        out.mux(stream.encode())


def decode_video(path: str | os.PathLike[str]) -> tuple[np.ndarray, np.ndarray]:
    """mp4 in any codec FFmpeg decodes -> (times (N,) seconds, frames (N, H, W, 3) uint8 RGB)."""
    times, frames = [], []
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        for f in container.decode(stream):
            times.append(float(f.time))
            frames.append(f.to_ndarray(format="rgb24"))
    if not frames:
        raise RuntimeError(f"{path}: no decodable video frames")
    return np.asarray(times), np.stack(frames)


def stream_info(path: str | os.PathLike[str]) -> dict[str, object]:
    """The `info` LeRobot stores per video feature, read from the stream itself (as LeRobot's get_video_info)."""
    with av.open(str(path)) as container:
        s = container.streams.video[0]
        has_audio = bool(container.streams.audio)
        return {
            "video.height": s.height,
            "video.width": s.width,
            "video.codec": s.codec_context.codec.canonical_name,
            "video.pix_fmt": s.pix_fmt,
            "video.is_depth_map": False,
            "video.fps": int(s.base_rate),
            "video.channels": 3,
            "has_audio": has_audio,
        }
