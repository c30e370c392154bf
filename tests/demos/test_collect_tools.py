"""Acceptance through the CLI: collect, dataset tools, replay (video + re-execution); plus episode buttons."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import gymnasium as gym
import numpy as np
import pytest
from demos_util import robot_rl

from robot_rl.demos.collect import CollectConfig, collect_to_store, make_collect_env, run_episode
from robot_rl.demos.dataset import info, validate
from robot_rl.demos.store import EpisodeStore
from robot_rl.demos.teleop import DeviceCommand, ScriptedDevice


def test_collect_writes_20_pickcube_demos_with_all_fields(demo_store: Path) -> None:
    with EpisodeStore(demo_store) as st:
        assert len(st) == 20
        assert {
            "state",
            "front",
            "wrist",
            "action",
            "reward",
            "success",
            "intervened",
            "timestamp",
            "front_timestamp",
            "wrist_timestamp",
        } <= set(st.keys)
        ep, m = st.episode(0), st.meta(0)
        assert ep["front"].dtype == np.uint8 and ep["front"].shape[1:] == (64, 64, 3)
        assert np.all(np.diff(ep["timestamp"]) > 0)
        assert m["source"] == "scripted" and m["task"] == "PickCube" and m["instruction"]
        assert m["policy_version"] is None and m["length"] == len(ep["action"])
        assert len({st.meta(i)["seed"] for i in range(len(st))}) == 20


def test_dataset_validate_and_info_cli(demo_store: Path) -> None:
    report = json.loads(robot_rl("dataset", "validate", str(demo_store)).stdout)
    assert report["ok"] and report["n_episodes"] == 20
    inf = json.loads(robot_rl("dataset", "info", str(demo_store)).stdout)
    assert inf["n_episodes"] == 20 and inf["keys"]["wrist"]["shape"] == [64, 64, 3]
    assert 0 < inf["success_rate"] <= 1 and inf["compression_ratio"] > 1 and inf["disk_bytes"] > 0


def test_replay_writes_playable_mp4(demo_store: Path, tmp_path: Path) -> None:
    out = tmp_path / "ep.mp4"
    res = json.loads(robot_rl("replay", str(demo_store), "--episode", "2", "--out", str(out), "--reexecute").stdout)
    with EpisodeStore(demo_store) as st:
        T = len(st.episode(2, ["action"])["action"])
    cap = cv2.VideoCapture(str(out))
    assert cap.isOpened()
    n, size = 0, None
    while True:
        ok, frame = cap.read()
        if not ok:
            break
        n, size = n + 1, frame.shape
    cap.release()
    assert n == T == res["video"]["frames"]
    assert size == (res["video"]["height"], res["video"]["width"], 3)
    assert res["video"]["width"] > 2 * res["video"]["height"] - 200  # two cameras side by side
    assert not res["reexecute"]["diverged"] and res["reexecute"]["max_state_error"] == 0.0


def test_merge_split_filter(demo_store: Path, tmp_path: Path) -> None:
    robot_rl("dataset", "split", str(demo_store), "--out", str(tmp_path / "split"), "--val", "0.25")
    with EpisodeStore(tmp_path / "split/train") as tr, EpisodeStore(tmp_path / "split/val") as va:
        assert (len(tr), len(va)) == (15, 5)
        seeds = {tr.meta(i)["seed"] for i in range(15)} | {va.meta(i)["seed"] for i in range(5)}
        assert len(seeds) == 20
    robot_rl(
        "dataset",
        "merge",
        str(tmp_path / "split/val"),
        str(tmp_path / "split/train"),
        "--out",
        str(tmp_path / "merged"),
    )
    assert info(tmp_path / "merged")["n_episodes"] == 20
    # the task as `train task=` names it (the episodes record PickCube)
    robot_rl("dataset", "filter", str(demo_store), "--out", str(tmp_path / "long"), "--min-length", "10", "--task",
             "pick_cube")  # fmt: skip
    with EpisodeStore(tmp_path / "long") as st, EpisodeStore(demo_store) as src:
        want = sum(src.meta(i)["length"] >= 10 for i in range(len(src)))
        assert len(st) == want and all(st.meta(i)["length"] >= 10 for i in range(len(st)))


def test_validate_reports_and_repairs_damage(demo_store: Path, tmp_path: Path) -> None:
    robot_rl("dataset", "filter", str(demo_store), "--out", str(tmp_path / "s"))
    # Lose the chunk files of one column (a torn copy / disk error): every episode's CRC check fails.
    for f in (tmp_path / "s/data/state").glob("c.*"):
        f.unlink()
    proc = robot_rl("dataset", "validate", str(tmp_path / "s"), check=False)
    assert proc.returncode == 1 and "INVALID" in proc.stderr
    # Repair would keep nothing (every intact image would go with the state column): it refuses, changing nothing.
    proc = robot_rl("dataset", "validate", str(tmp_path / "s"), "--repair", check=False)
    assert proc.returncode == 2 and "left as it is" in proc.stderr and "data/state" in proc.stderr
    assert any((tmp_path / "s/data/front").glob("c.*")) and not (tmp_path / "s.bak").exists()


def test_resume_continues_seeds(demo_store: Path, tmp_path: Path) -> None:
    robot_rl("dataset", "filter", str(demo_store), "--out", str(tmp_path / "s"))
    proc = robot_rl("collect", str(tmp_path / "s"), "-n", "22", check=False)
    assert proc.returncode == 2 and "--resume" in proc.stderr
    robot_rl("collect", str(tmp_path / "s"), "-n", "22", "--resume", "--no-fsync")
    with EpisodeStore(tmp_path / "s") as st:
        assert len(st) == 22 and len({st.meta(i)["seed"] for i in range(22)}) == 22


class ButtonDevice(ScriptedDevice):
    """Scripted motion plus scripted episode buttons: presses `events[k]` at step 3 of the k-th episode."""

    def __init__(self, events: list[str | None]) -> None:
        super().__init__()
        self.events, self.episode, self.t = events, -1, 0

    def reset(self) -> None:
        super().reset()
        self.episode, self.t = self.episode + 1, 0

    def poll(self, env) -> DeviceCommand:
        cmd = super().poll(env)
        self.t += 1
        ev = self.events[self.episode] if self.episode < len(self.events) else None
        if ev and self.t == 3:
            cmd.events = frozenset({ev})
        return cmd


def test_episode_buttons_keep_discard_rerecord(tmp_path: Path) -> None:
    cfg = CollectConfig(obs="state", success_only=True)
    dev = ButtonDevice(["rerecord", "failure", "success", None])
    with EpisodeStore(tmp_path / "s", "a", fsync=False) as st:
        stats = collect_to_store(cfg, dev, st, 2)
        metas = [st.meta(i) for i in range(len(st))]
    assert stats.attempts == 4 and stats.discarded == 2  # rerecorded + failure (success-only)
    assert [m["seed"] for m in metas] == [1, 2]  # rerecord reused seed 0, the failure consumed it
    assert metas[0]["length"] == 3 and metas[0]["success_label"] == "operator" and metas[0]["success"]


def test_policy_with_intervention_flags(tmp_path: Path) -> None:
    env = make_collect_env(CollectConfig(obs="state"))

    class Toggle(ScriptedDevice):
        t = 0

        def poll(self, env) -> DeviceCommand:
            cmd = super().poll(env)
            self.t += 1
            cmd.intervene = self.t > 2
            return cmd

    ep = run_episode(
        env, Toggle(), 0, task="PickCube", policy=lambda obs: np.zeros(4, np.float32), policy_version="ckpt-7"
    )
    assert not ep.data["intervened"][:2].any() and ep.data["intervened"][2:].all()
    assert ep.meta["source"] == "intervention" and ep.meta["policy_version"] == "ckpt-7"
    assert np.all(ep.data["action"][:2] == 0)


def test_labelling_frames_ends_the_take_at_a_safety_terminal_and_goes_on_past_success() -> None:
    """With `label_frames`, the env's success ending is ignored (the person holds the success pose for the labelled
    frames), but a safety terminal ends the take: stepping on would store the held arm's steps, each a terminal."""

    class Terminal(gym.Wrapper):
        def __init__(self, env: gym.Env, at: int, success: bool) -> None:
            super().__init__(env)
            self.at, self.succeed, self.t = at, success, 0

        def reset(self, **kw):
            self.t = 0
            return self.env.reset(**kw)

        def step(self, action):
            obs, reward, _, truncated, info = self.env.step(action)
            self.t += 1
            ended = self.t >= self.at
            return obs, reward, ended, truncated, {**info, "success": ended and self.succeed}

    cfg = CollectConfig(obs="state")
    for succeed in (False, True):
        env = Terminal(make_collect_env(cfg), at=4, success=succeed)
        ep = run_episode(env, ScriptedDevice(), 0, task="PickCube", label_frames=3)
        # No success key pressed: a success goes on to the episode's limit.
        assert len(ep.data["action"]) == (env.unwrapped.max_episode_steps if succeed else 4), succeed


def test_validate_semantic_problem(tmp_path: Path) -> None:
    with EpisodeStore(tmp_path / "s", "a", fsync=False) as st:
        st.add_episode({"action": np.array([[np.nan]], np.float32)}, meta={"length": 2})
    report = validate(tmp_path / "s")
    assert not report["ok"] and any("length" in p for p in report["problems"])
    assert any("non-finite" in p for p in report["problems"])


@pytest.mark.parametrize("bad", ["nope"])
def test_unknown_backend(bad: str) -> None:
    with pytest.raises(ValueError, match="backend"):
        make_collect_env(CollectConfig(backend=bad))


def test_an_aborted_take_is_recorded_again_and_the_session_goes_on(tmp_path: Path, capsys) -> None:
    """A robot stream that is really late (or an e-stop, a hold) aborts one take, never the collect process."""
    from robot_rl.real.robot import StaleDataError

    class LateOnce(gym.Wrapper):
        late = True

        def step(self, action):
            if self.late:
                LateOnce.late = False
                raise StaleDataError("/robot_rl/camera/front/image: newest message is 0.5 s old")
            return self.env.step(action)

    cfg = CollectConfig(obs="state")
    with EpisodeStore(tmp_path / "s", "a", fsync=False) as st:
        stats = collect_to_store(cfg, ScriptedDevice(), st, 2, env=LateOnce(make_collect_env(cfg)))
        seeds = [st.meta(i)["seed"] for i in range(len(st))]
    assert len(seeds) == 2 and stats.attempts == 3 and stats.discarded == 1
    assert seeds == [0, 1]  # the aborted take's seed is recorded again
    assert "episode aborted (StaleDataError: /robot_rl/camera/front/image" in capsys.readouterr().err
