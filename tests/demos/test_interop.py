"""LeRobot v3 round trip, ROS 2 bag import (MCAP and sqlite3, written with rosbags), legacy zarr v2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import cv2
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zarr
from demos_util import robot_rl

from robot_rl.demos.interop.lerobot import export_lerobot, import_lerobot
from robot_rl.demos.interop.rosbag import import_rosbag
from robot_rl.demos.store import EpisodeStore

_INDEX_COLUMNS = ("timestamp", "frame_index", "episode_index", "index", "task_index")
_Q = ("q01", "q10", "q50", "q90", "q99")


FIXTURES = Path(__file__).parent / "fixtures"
LEROBOT = FIXTURES / "lerobot_v30"  # written by LeRobot 0.4.4 itself: make_lerobot_fixtures.py
CAMS = {"front": "observation.images.front", "wrist": "observation.images.wrist", "side": "observation.images.side"}


@pytest.fixture(scope="module")
def recorded() -> dict[str, np.ndarray]:
    """What the fixture generator handed LeRobot's add_frame, and what LeRobot's loader gave back."""
    with np.load(FIXTURES / "lerobot_v30.npz") as z:
        return {k: z[k] for k in z.files}


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("lerobot") / "store"
    summary = json.loads(robot_rl("convert", "lerobot-import", str(LEROBOT), "--out", str(out)).stdout)
    assert summary["episodes"] == 3 and summary["success_from"] == ["next.reward (sparse 0/1)"]
    return out


def _layout(root: Path) -> dict[str, object]:
    """Everything about a dataset's meta that LeRobot's readers and edit tools depend on, values left out."""
    info = json.loads((root / "meta/info.json").read_text())
    stats = json.loads((root / "meta/stats.json").read_text())
    eps = pq.read_schema(root / "meta/episodes/chunk-000/file-000.parquet")
    tasks = pq.read_schema(root / "meta/tasks.parquet")
    data = pq.read_schema(root / "data/chunk-000/file-000.parquet")
    return {
        "info": {k: type(v).__name__ for k, v in info.items() if k != "robot_rl"},
        "sizes": [info[k] for k in ("codebase_version", "chunks_size", "data_files_size_in_mb", "data_path")],
        "features": {
            k: {**{f: v for f, v in ft.items() if f != "info"}, "info": sorted(ft.get("info", {}))}
            for k, ft in info["features"].items()
        },
        "stats": {k: sorted(v) for k, v in stats.items()},
        "episodes": {f.name: str(f.type) for f in eps if not f.name.startswith("robot_rl/")},
        "tasks": [(f.name, str(f.type)) for f in tasks],
        "tasks_index": json.loads(tasks.metadata[b"pandas"])["index_columns"],
        "data": {f.name: str(f.type) for f in data},
    }


def test_lerobot_import_of_lerobot_written_dataset(imported: Path, recorded: dict[str, np.ndarray]) -> None:
    """AV1 and H.264 videos and an `image` feature, two tasks: values as recorded, frames as LeRobot decodes them."""
    with EpisodeStore(imported) as st:
        assert len(st) == 3 and sorted(st.keys) == ["action", "front", "reward", "side", "state", "terminated", "wrist"]
        got = {k: np.concatenate([st.episode(i)[k] for i in range(3)]) for k in st.keys}
        metas = [st.meta(i) for i in range(3)]
        assert np.array_equal(st.final(1)["front"], st.episode(1)["front"][-1])
    for key, name in (("state", "observation.state"), ("action", "action")):
        assert got[key].dtype == np.float32 and np.array_equal(got[key], recorded[name]), key
    assert np.array_equal(got["reward"], recorded["next.reward"][:, 0])
    assert got["terminated"].dtype == bool and np.array_equal(got["terminated"], recorded["next.done"][:, 0])
    assert np.array_equal(got["side"], recorded["observation.images.side"])  # PNG in the parquet: lossless
    for key in ("front", "wrist"):  # AV1, H.264: exactly LeRobot's own (pyav) decode, near the source
        name = CAMS[key]
        assert np.array_equal(got[key], recorded[f"read/{name}"]), key
        assert np.abs(got[key].astype(float) - recorded[name]).mean() < 8.0, key
    assert [m["task"] for m in metas] == [str(t) for t in recorded["task"][[0, 7, 12]]]
    assert [m["success"] for m in metas] == [True, False, True]
    assert sorted(metas[0]["lerobot_stats"]["observation.state"]) == sorted(
        ["min", "max", "mean", "std", "count", "q01", "q10", "q50", "q90", "q99"]
    )


def test_lerobot_fixture_import_export_matches_lerobot(imported: Path, tmp_path: Path) -> None:
    """LeRobot's dataset -> store -> our export: LeRobot's meta layout key by key, its data and stats values."""
    out = tmp_path / "again"
    robot_rl("convert", "lerobot-export", str(imported), "--out", str(out), "--robot-type", "")
    ours, theirs = _layout(out), _layout(LEROBOT)
    for part in theirs:
        assert ours[part] == theirs[part], part
    ours, theirs = (pq.read_table(r / "data/chunk-000/file-000.parquet") for r in (out, LEROBOT))
    for col in ("observation.state", "action", "next.reward", "next.done", *_INDEX_COLUMNS):
        assert ours.column(col).equals(theirs.column(col)), col
    assert pq.read_table(out / "meta/tasks.parquet").equals(pq.read_table(LEROBOT / "meta/tasks.parquet"))
    a, b = (json.loads((r / "meta/stats.json").read_text()) for r in (out, LEROBOT))
    for name in ("observation.state", "action", "next.reward", "timestamp", "index", "task_index"):
        for k in a[name]:
            assert np.allclose(a[name][k], b[name][k], rtol=1e-6, atol=1e-7), (name, k)  # LeRobot sums float32
    # images went through H.264 (extremes move most) and LeRobot wraps uint8 squares (its image std is 0)
    for k in ("mean", "q50"):
        assert np.allclose(a["observation.images.wrist"][k], b["observation.images.wrist"][k], atol=0.03), k
    assert np.allclose(a["observation.images.side"]["max"], b["observation.images.side"]["max"])  # lossless PNG
    ea, eb = (pq.read_table(r / "meta/episodes/chunk-000/file-000.parquet") for r in (out, LEROBOT))
    for col in eb.column_names:
        if col.startswith("stats/observation.images"):
            continue
        if col.endswith("_timestamp"):  # LeRobot adds episode durations: 1.2 + 0.6 = 1.7999999999999998
            assert np.allclose(ea.column(col).to_numpy(), eb.column(col).to_numpy(), rtol=0, atol=1e-9), col
        elif not col.startswith("stats/"):
            assert ea.column(col).to_pylist() == eb.column(col).to_pylist(), col
        else:
            for x, y in zip(ea.column(col).to_pylist(), eb.column(col).to_pylist(), strict=True):
                assert np.allclose(x, y, rtol=1e-6, atol=1e-7), col
    info = json.loads((out / "meta/info.json").read_text())
    assert info["fps"] == 10 and info["features"]["observation.images.front"]["info"]["video.codec"] == "av1"


def test_lerobot_export_import_round_trip(demo_store: Path, tmp_path: Path) -> None:
    lr, back = tmp_path / "lerobot", tmp_path / "back"
    robot_rl("convert", "lerobot-export", str(demo_store), "--out", str(lr))
    info = json.loads((lr / "meta/info.json").read_text())
    assert info["codebase_version"] == "v3.0" and info["total_episodes"] == 20 and info["fps"] == 10
    assert info["features"]["observation.images.front"]["dtype"] == "video"
    assert info["features"]["observation.images.front"]["info"]["video.codec"] == "av1"
    assert info["features"]["observation.state"]["names"][0] == "state_0"
    layout = _layout(lr)
    assert layout["tasks_index"] == ["__index_level_0__"]
    assert {k for k, ks in layout["stats"].items() if "q99" not in ks} == set()
    stat_cols = {c for c in layout["episodes"] if c.startswith("stats/observation.state/")}
    assert {c.rsplit("/", 1)[1] for c in stat_cols} == {"min", "max", "mean", "std", "count", *_Q}
    robot_rl("convert", "lerobot-import", str(lr), "--out", str(back))
    with EpisodeStore(demo_store) as a, EpisodeStore(back) as b:
        assert len(a) == len(b) and a.keys == b.keys and a.final_keys == b.final_keys
        for i in range(len(a)):
            ea, eb = a.episode(i), b.episode(i)
            for k in ea:
                assert ea[k].dtype == eb[k].dtype and ea[k].shape == eb[k].shape, k
                if k in ("front", "wrist"):
                    assert np.abs(ea[k].astype(np.int16) - eb[k]).mean() < 8.0, k  # AV1 codec tolerance
                else:
                    assert np.array_equal(ea[k], eb[k]), k  # bit-exact
            fa, fb = a.final(i), b.final(i)
            assert all(np.array_equal(fa[k], fb[k]) for k in fa)
            assert {**a.meta(i), "imported_from": str(lr)} == b.meta(i)


def _gradients(T: int, seed: int) -> np.ndarray:
    """(T, 32, 32, 3) smooth moving colour ramps: what cameras see and codecs keep well."""
    t, y, x = np.mgrid[0:T, 0:32, 0:32].astype(np.float32)
    rgb = np.stack([128 + 90 * np.sin((x + 3 * t) / 6 + seed), 128 + 90 * np.cos(y / 5 - t), 60 + 0 * x], -1)
    return rgb.astype(np.uint8)


def _small_store(path: Path, instructions: tuple[str, ...]) -> None:
    rng = np.random.default_rng(0)
    with EpisodeStore(path, "a") as st:
        for i, instruction in enumerate(instructions):
            T = 5 + i
            data = {
                "state": rng.standard_normal((T, 3)).astype(np.float32),
                "action": rng.uniform(-1, 1, (T, 2)).astype(np.float32),
                "front": _gradients(T, i),
                "grid": rng.integers(0, 9, (T, 2, 2)).astype(np.int16),
            }
            st.add_episode(data, meta={"instruction": instruction}, final={"state": data["state"][-1]})


def test_lerobot_export_h264_tasks_and_checks(tmp_path: Path) -> None:
    store, out = tmp_path / "s", tmp_path / "lr"
    _small_store(store, ("open the drawer", "close the drawer", "open the drawer"))
    with pytest.raises(ValueError, match="integer"):
        export_lerobot(store, tmp_path / "x", fps=7.5)
    export_lerobot(store, out, fps=15, vcodec="h264")
    info = json.loads((out / "meta/info.json").read_text())
    assert info["fps"] == 15 and info["total_tasks"] == 2
    assert info["features"]["observation.images.front"]["info"]["video.codec"] == "h264"
    assert info["features"]["robot_rl.grid"]["shape"] == [4]  # LeRobot's loader takes 1-D lists
    tasks = pq.read_table(out / "meta/tasks.parquet").to_pylist()
    assert tasks == [
        {"task_index": 0, "__index_level_0__": "open the drawer"},
        {"task_index": 1, "__index_level_0__": "close the drawer"},
    ]
    assert pq.read_table(out / "data/chunk-000/file-000.parquet").column("task_index").to_pylist()[5:11] == [1] * 6
    back = import_lerobot(out, tmp_path / "back")
    with EpisodeStore(store) as a, EpisodeStore(tmp_path / "back") as b:
        assert np.array_equal(a.episode(2)["grid"], b.episode(2)["grid"])
        assert np.abs(a.episode(1)["front"].astype(float) - b.episode(1)["front"]).mean() < 8.0
    assert back["episodes"] == 3 and not list(tmp_path.glob(".*tmp*"))


@pytest.mark.parametrize("damage", ["video", "column", "frames"])
def test_lerobot_failed_import_leaves_nothing(tmp_path: Path, damage: str) -> None:
    root, out = tmp_path / "ds", tmp_path / "store"
    shutil.copytree(LEROBOT, root)
    if damage == "video":
        (root / "videos/observation.images.wrist/chunk-000/file-000.mp4").unlink()
    elif damage == "column":
        t = pq.read_table(root / "data/chunk-000/file-000.parquet")
        pq.write_table(t.drop_columns(["action"]), root / "data/chunk-000/file-000.parquet")
    else:  # the last episode claims more frames than the video holds
        p = root / "meta/episodes/chunk-000/file-000.parquet"
        t = pq.read_table(p)
        i = t.column_names.index("videos/observation.images.front/from_timestamp")
        pq.write_table(t.set_column(i, t.field(i), pa.array([0.0, 0.7, 1.5])), p)
    with pytest.raises((ValueError, FileNotFoundError)):
        import_lerobot(root, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]


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
    out = robot_rl("convert", "legacy-zarr", str(src), "--out", str(tmp_path / "s"), "--task", "push_t")
    assert out.returncode == 0
    with EpisodeStore(tmp_path / "s") as st:
        assert len(st) == 3 and np.array_equal(st.episode_ends, ends)
        assert set(st.keys) == {"front", "state", "action"} and set(st.final_keys) == {"front", "state"}
        assert np.array_equal(st.episode(1)["front"], data["img"][5:12])
        assert np.array_equal(st.final(1)["state"], data["state"][11])
        assert st.meta(2)["task"] == "push_t"
