"""LeRobot v3 round trip, ROS 2 bag import (MCAP and sqlite3, written with rosbags), legacy zarr v2."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pyarrow.parquet as pq
import pytest
import zarr
from demos_util import robot_rl

from robot_rl.demos.interop.rosbag import import_rosbag
from robot_rl.demos.store import EpisodeStore


def test_lerobot_export_import_round_trip(demo_store: Path, tmp_path: Path) -> None:
    lr, back = tmp_path / "lerobot", tmp_path / "back"
    robot_rl("convert", "lerobot-export", str(demo_store), str(lr))
    info = json.loads((lr / "meta/info.json").read_text())
    assert info["codebase_version"] == "v3.0" and info["total_episodes"] == 20
    assert info["features"]["observation.images.front"]["dtype"] == "video"
    assert (lr / "videos/observation.images.wrist/chunk-000/file-000.mp4").is_file()
    eps = pq.read_table(lr / "meta/episodes/chunk-000/file-000.parquet")
    assert eps.num_rows == 20 and "dataset_from_index" in eps.column_names
    robot_rl("convert", "lerobot-import", str(lr), str(back))
    with EpisodeStore(demo_store) as a, EpisodeStore(back) as b:
        assert len(a) == len(b) and a.keys == b.keys and a.final_keys == b.final_keys
        for i in range(len(a)):
            ea, eb = a.episode(i), b.episode(i)
            for k in ea:
                assert ea[k].dtype == eb[k].dtype and ea[k].shape == eb[k].shape, k
                if k in ("front", "wrist"):
                    assert np.abs(ea[k].astype(np.int16) - eb[k]).mean() < 8.0, k  # mp4v codec tolerance
                else:
                    assert np.array_equal(ea[k], eb[k]), k  # bit-exact
            fa, fb = a.final(i), b.final(i)
            assert all(np.array_equal(fa[k], fb[k]) for k in fa)
            assert {**a.meta(i), "imported_from": str(lr)} == b.meta(i)


def _write_bag(path: Path, plugin: str) -> None:
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore

    ts = get_typestore(Stores.ROS2_HUMBLE)
    Header, Time = ts.types["std_msgs/msg/Header"], ts.types["builtin_interfaces/msg/Time"]
    JointState, Image = ts.types["sensor_msgs/msg/JointState"], ts.types["sensor_msgs/msg/Image"]
    PoseStamped = ts.types["geometry_msgs/msg/PoseStamped"]
    CompressedImage = ts.types["sensor_msgs/msg/CompressedImage"]
    Pose, Point, Quat = (
        ts.types["geometry_msgs/msg/Pose"],
        ts.types["geometry_msgs/msg/Point"],
        ts.types["geometry_msgs/msg/Quaternion"],
    )

    def header(t: float) -> object:
        return Header(stamp=Time(sec=int(t), nanosec=int(round((t % 1) * 1e9))), frame_id="base")

    with Writer(path, version=9, storage_plugin=getattr(StoragePlugin, plugin)) as w:
        cj = w.add_connection("/joint_states", JointState.__msgtype__, typestore=ts)
        cp = w.add_connection("/ee_pose", PoseStamped.__msgtype__, typestore=ts)
        ci = w.add_connection("/camera/image_raw", Image.__msgtype__, typestore=ts)
        cc = w.add_connection("/wrist/compressed", CompressedImage.__msgtype__, typestore=ts)
        # two demonstrations, 2 s each, separated by a 3 s pause; camera 5 Hz, joints 50 Hz, pose every 0.14 s
        for t0 in (100.0, 105.0):
            for k in range(100):
                t = t0 + k * 0.02
                msg = JointState(
                    header=header(t),
                    name=["j1", "j2"],
                    position=np.array([t, -t]),
                    velocity=np.zeros(2),
                    effort=np.zeros(0),
                )
                w.write(cj, int(t * 1e9), ts.serialize_cdr(msg, JointState.__msgtype__))
                if k % 7 == 0:
                    pose = PoseStamped(
                        header=header(t),
                        pose=Pose(position=Point(x=t, y=0.0, z=1.0), orientation=Quat(x=0.0, y=0.0, z=0.0, w=1.0)),
                    )
                    w.write(cp, int(t * 1e9), ts.serialize_cdr(pose, PoseStamped.__msgtype__))
                if k % 10 == 5:  # camera ticks 0.1 s after the joints started
                    rgb = np.full((8, 12, 3), k, np.uint8)
                    rgb[..., 2] = int(t0) % 256
                    img = Image(
                        header=header(t),
                        height=8,
                        width=12,
                        encoding="rgb8",
                        is_bigendian=0,
                        step=36,
                        data=rgb.reshape(-1),
                    )
                    w.write(ci, int(t * 1e9), ts.serialize_cdr(img, Image.__msgtype__))
                    png = cv2.imencode(".png", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))[1].reshape(-1)
                    comp = CompressedImage(header=header(t), format="png", data=png)
                    w.write(cc, int(t * 1e9), ts.serialize_cdr(comp, CompressedImage.__msgtype__))


@pytest.mark.parametrize("plugin", ["MCAP", "SQLITE3"])
def test_rosbag_import_episodes_and_alignment(tmp_path: Path, plugin: str) -> None:
    bag = tmp_path / "bag"
    _write_bag(bag, plugin)
    topics = {
        "/camera/image_raw": "front",
        "/wrist/compressed": "wrist",
        "/joint_states": "state:position",
        "/ee_pose": "ee_pose",
    }
    n = import_rosbag([bag], tmp_path / "s", topics, episode_gap_s=1.0)
    assert n == 2
    with EpisodeStore(tmp_path / "s") as st:
        assert len(st) == 2
        for i, t0 in enumerate((100.0, 105.0)):
            ep = st.episode(i)
            assert len(ep["front"]) == 10 and ep["front"].shape[1:] == (8, 12, 3)
            assert np.array_equal(ep["front"], ep["wrist"])  # raw and PNG-compressed streams agree
            assert np.all(ep["front"][:, 0, 0, 2] == int(t0) % 256)
            ticks = t0 + 0.1 + 0.2 * np.arange(10)
            # sample-and-hold: joints at the tick exactly, pose from the latest message at or before it
            assert np.allclose(ep["state"][:, 0], ticks, atol=1e-4)
            assert np.allclose(ep["state"][:, 1], -ticks, atol=1e-4)
            held = t0 + np.floor(np.round((ticks - t0) / 0.14, 6)) * 0.14
            assert np.allclose(ep["ee_pose"][:, 0], held, atol=1e-4)
            assert np.allclose(ep["ee_pose"][:, 3:], [0, 0, 0, 1])
            assert np.allclose(ep["timestamp"], ticks - ticks[0], atol=1e-6)
            assert st.meta(i)["source"] == "teleop" and st.meta(i)["length"] == 10


def test_rosbag_unknown_topic(tmp_path: Path) -> None:
    _write_bag(tmp_path / "bag", "MCAP")
    with pytest.raises(ValueError, match="not in bag"):
        import_rosbag([tmp_path / "bag"], tmp_path / "s", {"/nope": "x"})


def test_legacy_zarr_v2_replay_buffer(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    src = tmp_path / "replay.zarr"
    root = zarr.open_group(str(src), mode="w", zarr_format=2)
    ends = np.array([5, 12, 20])
    data = {
        "img": rng.integers(0, 255, (20, 16, 16, 3), np.uint8),
        "state": rng.standard_normal((20, 2)).astype(np.float32),
        "action": rng.standard_normal((20, 2)).astype(np.float32),
    }
    for k, v in data.items():
        root.create_array(f"data/{k}", data=v, chunks=(4, *v.shape[1:]))
    root.create_array("meta/episode_ends", data=ends)
    assert (src / "data/img/.zarray").is_file()  # really v2 on disk
    assert robot_rl("convert", "legacy-zarr", str(src), str(tmp_path / "s"), "--task", "push_t").returncode == 0
    with EpisodeStore(tmp_path / "s") as st:
        assert len(st) == 3 and np.array_equal(st.episode_ends, ends)
        assert set(st.keys) == {"front", "state", "action"} and set(st.final_keys) == {"front", "state"}
        assert np.array_equal(st.episode(1)["front"], data["img"][5:12])
        assert np.array_equal(st.final(1)["state"], data["state"][11])
        assert st.meta(2)["task"] == "push_t"
