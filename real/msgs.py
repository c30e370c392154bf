"""Standard ROS 2 messages <-> numpy: the only place that knows ROS field layouts and conventions.

ROS quaternions are (x, y, z, w); everything else in robot_rl (MuJoCo, the safety layer) uses (w, x, y, z).
Stamps are float seconds on the sender's clock; the deployment assumes the robot PC and the policy PC share
one clock (same machine, or PTP/chrony synced), since staleness is judged across processes.
"""

from __future__ import annotations

import math
from typing import Any

import cv2
import numpy as np

from robot_rl.transport import typesys

JOINT_STATE = "sensor_msgs/msg/JointState"
POSE = "geometry_msgs/msg/PoseStamped"
TWIST = "geometry_msgs/msg/TwistStamped"
COMMAND = {"pose": POSE, "twist": TWIST}  # RobotConfig.command_type -> its command topic's type
WRENCH = "geometry_msgs/msg/WrenchStamped"
IMAGE = "sensor_msgs/msg/Image"
COMPRESSED_IMAGE = "sensor_msgs/msg/CompressedImage"
CAMERA_INFO = "sensor_msgs/msg/CameraInfo"
FLOAT64 = "std_msgs/msg/Float64"
BOOL = "std_msgs/msg/Bool"
INT64 = "std_msgs/msg/Int64"
STRING = "std_msgs/msg/String"


def _t(ros_type: str) -> Any:
    return typesys.msg_class(ros_type)


def header_at(stamp: float, frame_id: str) -> Any:
    sec = math.floor(stamp)
    return typesys.header(int(sec), min(int((stamp - sec) * 1e9), 999_999_999), frame_id)


def stamp_of(msg: Any) -> float:
    return msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec


def pose_stamped(pos: np.ndarray, quat_wxyz: np.ndarray, stamp: float, frame_id: str) -> Any:
    w, x, y, z = (float(v) for v in quat_wxyz)
    pose = _t("geometry_msgs/msg/Pose")(
        position=_t("geometry_msgs/msg/Point")(x=float(pos[0]), y=float(pos[1]), z=float(pos[2])),
        orientation=_t("geometry_msgs/msg/Quaternion")(x=x, y=y, z=z, w=w),
    )
    return _t(POSE)(header=header_at(stamp, frame_id), pose=pose)


def pose_of(msg: Any) -> tuple[np.ndarray, np.ndarray]:
    """(position (3,), quaternion w, x, y, z (4,)) as float64."""
    p, q = msg.pose.position, msg.pose.orientation
    return np.array([p.x, p.y, p.z]), np.array([q.w, q.x, q.y, q.z])


def _vector3(v: np.ndarray) -> Any:
    return _t("geometry_msgs/msg/Vector3")(x=float(v[0]), y=float(v[1]), z=float(v[2]))


def _array3(v: Any) -> np.ndarray:
    return np.array([v.x, v.y, v.z])


def twist_stamped(linear: np.ndarray, angular: np.ndarray, stamp: float, frame_id: str) -> Any:
    twist = _t("geometry_msgs/msg/Twist")(linear=_vector3(linear), angular=_vector3(angular))
    return _t(TWIST)(header=header_at(stamp, frame_id), twist=twist)


def twist_of(msg: Any) -> tuple[np.ndarray, np.ndarray]:
    return _array3(msg.twist.linear), _array3(msg.twist.angular)


def wrench_stamped(force: np.ndarray, torque: np.ndarray, stamp: float, frame_id: str) -> Any:
    wrench = _t("geometry_msgs/msg/Wrench")(force=_vector3(force), torque=_vector3(torque))
    return _t(WRENCH)(header=header_at(stamp, frame_id), wrench=wrench)


def wrench_of(msg: Any) -> tuple[np.ndarray, np.ndarray]:
    """(force (3,), torque (3,)) in the message's own frame."""
    return _array3(msg.wrench.force), _array3(msg.wrench.torque)


def joint_state(names: list[str], pos: np.ndarray, vel: np.ndarray, stamp: float) -> Any:
    return _t(JOINT_STATE)(
        header=header_at(stamp, ""),
        name=list(names),
        position=np.asarray(pos, np.float64),
        velocity=np.asarray(vel, np.float64),
        effort=np.zeros(0),
    )


def joint_positions(msg: Any, names: list[str]) -> np.ndarray:
    """Positions in `names` order (drivers publish joints in any order); a missing joint is NaN, i.e. invalid."""
    index = {n: i for i, n in enumerate(msg.name)}
    pos = np.asarray(msg.position, np.float64)
    return np.array([pos[index[n]] if n in index and index[n] < len(pos) else np.nan for n in names])


def joint_velocities(msg: Any, names: list[str]) -> np.ndarray:
    """Velocities in `names` order; a joint without one (drivers may leave `velocity` empty) is NaN."""
    index = {n: i for i, n in enumerate(msg.name)}
    vel = np.asarray(msg.velocity, np.float64)
    return np.array([vel[index[n]] if n in index and index[n] < len(vel) else np.nan for n in names])


def scalar(ros_type: str, value: float | bool | int) -> Any:
    return _t(ros_type)(data=value)


def string(text: str) -> Any:
    return _t(STRING)(data=text)


def image_msg(rgb: np.ndarray, stamp: float, frame_id: str) -> Any:
    h, w, _ = rgb.shape
    return _t(IMAGE)(
        header=header_at(stamp, frame_id), height=h, width=w, encoding="rgb8", is_bigendian=0, step=3 * w,
        data=np.ascontiguousarray(rgb, np.uint8).reshape(-1),
    )  # fmt: skip


def jpeg_msg(rgb: np.ndarray, stamp: float, frame_id: str) -> Any:
    """A CompressedImage as image_transport's compressed plugin sends it (jpeg of the bgr8 image)."""
    ok, buf = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, 95])
    assert ok
    return _t(COMPRESSED_IMAGE)(header=header_at(stamp, frame_id), format="rgb8; jpeg compressed bgr8",
                                data=buf.reshape(-1))  # fmt: skip


_BT601 = np.array([[0.257, 0.504, 0.098], [-0.148, -0.291, 0.439], [0.439, -0.368, -0.071]])  # RGB -> YUV


def yuyv_msg(rgb: np.ndarray, stamp: float, frame_id: str) -> Any:
    """An Image as a webcam sends it uncompressed: packed YUV 4:2:2, Y0 U Y1 V (usb_cam's `yuv422_yuy2`)."""
    h, w, _ = rgb.shape
    yuv = rgb.astype(np.float64) @ _BT601.T + (16.0, 128.0, 128.0)  # video range, as webcams send and cv2 reads it
    out = np.empty((h, w, 2), np.uint8)
    out[..., 0] = np.clip(yuv[..., 0].round(), 0, 255)
    chroma = 0.5 * (yuv[:, 0::2, 1:] + yuv[:, 1::2, 1:])  # one U and V per pixel pair, averaged
    chroma = np.clip(chroma.round(), 0, 255)
    out[:, 0::2, 1], out[:, 1::2, 1] = chroma[..., 0], chroma[..., 1]
    return _t(IMAGE)(
        header=header_at(stamp, frame_id), height=h, width=w, encoding="yuv422_yuy2", is_bigendian=0, step=2 * w,
        data=out.reshape(-1),
    )  # fmt: skip


def camera_info(height: int, width: int, stamp: float, frame_id: str) -> Any:
    """An uncalibrated camera's info (usb_cam without a calibration file: size only, zero intrinsics)."""
    return _t(CAMERA_INFO)(header=header_at(stamp, frame_id), height=height, width=width, distortion_model="",
                           d=np.zeros(0), k=np.zeros(9), r=np.zeros(9), p=np.zeros(12), binning_x=0, binning_y=0,
                           roi=_t("sensor_msgs/msg/RegionOfInterest")(x_offset=0, y_offset=0, height=0, width=0,
                                                                      do_rectify=False))  # fmt: skip


# sensor_msgs/Image encoding -> (bytes per pixel, cv2 conversion to RGB; None: already RGB). The packed YUV 4:2:2
# ones are what a webcam sends uncompressed (usb_cam's default pixel_format yuyv publishes yuv422_yuy2); ROS's own
# "yuv422" is the UYVY byte order (sensor_msgs/image_encodings, as cv_bridge reads it); "yuyv"/"uyvy" name the byte
# orders themselves, as some drivers write them.
_ENCODINGS = {
    "rgb8": (3, None), "bgr8": (3, cv2.COLOR_BGR2RGB), "rgba8": (4, cv2.COLOR_RGBA2RGB),
    "bgra8": (4, cv2.COLOR_BGRA2RGB), "mono8": (1, cv2.COLOR_GRAY2RGB),
    "yuv422_yuy2": (2, cv2.COLOR_YUV2RGB_YUY2), "yuyv": (2, cv2.COLOR_YUV2RGB_YUY2),
    "yuv422": (2, cv2.COLOR_YUV2RGB_UYVY), "uyvy": (2, cv2.COLOR_YUV2RGB_UYVY),
}  # fmt: skip


def decode_image(msg: Any, compressed: bool, size: int, crop: list[int] | None = None) -> np.ndarray:
    """uint8 RGB (size, size, 3) from Image (`_ENCODINGS`) or CompressedImage (jpeg/png), cut to `crop` ([top, left,
    height, width] in source pixels) before the resize."""
    data = np.asarray(msg.data, np.uint8)
    if compressed:
        bgr = cv2.imdecode(data, cv2.IMREAD_COLOR)
        if bgr is None:
            raise ValueError(f"cannot decode compressed image (format {msg.format!r})")
        rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
    else:
        if msg.encoding not in _ENCODINGS:
            raise ValueError(f"unsupported image encoding {msg.encoding!r}; expected one of {sorted(_ENCODINGS)}")
        c, conv = _ENCODINGS[msg.encoding]
        rows = data.reshape(msg.height, msg.step)[:, : msg.width * c]
        img = rows.reshape(msg.height, msg.width, c)
        rgb = cv2.cvtColor(img, conv) if conv is not None else img
    if crop:
        top, left, h, w = crop
        if top + h > rgb.shape[0] or left + w > rgb.shape[1]:
            raise ValueError(f"crop {list(crop)} does not fit a {rgb.shape[1]}x{rgb.shape[0]} image")
        rgb = rgb[top : top + h, left : left + w]
    if rgb.shape[:2] != (size, size):
        rgb = cv2.resize(rgb, (size, size), interpolation=cv2.INTER_AREA)
    return np.array(rgb, order="C")  # own, writable memory: an rgb8 frame at size is otherwise a view of the message
