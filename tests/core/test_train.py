"""The main job end to end, tiny budgets: it learns, it resumes after SIGKILL, bad actions never reach MuJoCo."""

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import cv2
import gymnasium as gym
import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from robot_rl.algos.sac import SAC, SACConfig
from robot_rl.checkpoint import Checkpoint
from robot_rl.cli import main
from robot_rl.config import load_config
from robot_rl.envs import make_env
from robot_rl.evaluation import evaluate, evaluate_checkpoint, failures_to_miss
from robot_rl.loop import run as loop_run
from robot_rl.loop import trainer
from robot_rl.loop.actor import Actor
from robot_rl.sim.config import EnvConfig, nominal

pytestmark = pytest.mark.slow


def test_short_run_beats_untrained_policy(pickcube_run: Path, tmp_path: Path) -> None:
    summary = json.loads((pickcube_run / "summary.json").read_text())
    env = make_env(EnvConfig(), seed=0)
    untrained = evaluate(env, SAC(SACConfig(), 13, 4).policy, 20).success_rate
    assert summary["final_success_rate"] >= untrained + 0.5, (summary["final_success_rate"], untrained)
    assert summary["updates"] == summary["env_steps"]  # the UTD rate limit held
    assert 0.0 < summary["intervention_rate"] < 1.0

    # The checkpoint alone reproduces the policy: `robot-rl eval` success matches and videos are playable.
    ev = evaluate_checkpoint(Checkpoint(pickcube_run), episodes=3, video_dir=tmp_path / "videos")
    assert ev["success_rate"] >= untrained + 0.3
    cap = cv2.VideoCapture(str(tmp_path / "videos" / "episode_000.mp4"))
    assert int(cap.get(cv2.CAP_PROP_FRAME_COUNT)) == ev["per_episode"][0]["length"]
    ok, frame = cap.read()
    assert ok and frame.shape[1] > frame.shape[0]  # two cameras side by side


def test_eval_nominal_drops_the_training_randomisation_and_keeps_what_the_policy_observes(
    pickcube_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    plain = pickcube_run / "checkpoints" / "final"
    randomised = tmp_path / "randomised"
    shutil.copytree(plain, randomised)
    cfg = OmegaConf.load(randomised / "config.yaml")
    cfg.env.randomization.table_height = [0.03, 0.03]  # as if trained with a raised table
    OmegaConf.save(cfg, randomised / "config.yaml")

    def episodes(ckpt: Path, *flags: str) -> list[tuple]:
        assert main(["eval", str(ckpt), "--episodes", "3", *flags]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["randomization"] == ("nominal" if flags else "as trained")
        ev = evaluate_checkpoint(Checkpoint(ckpt), 3, nominal=bool(flags))  # the CLI prints it without per_episode
        assert ev["success_rate"] == out["success_rate"]
        return [(e["return"], e["length"]) for e in ev["per_episode"]]

    assert episodes(randomised, "--nominal") == episodes(plain)
    assert episodes(randomised) != episodes(plain)


def test_a_randomised_run_is_judged_on_the_nominal_scene(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each evaluation of a `robust` run also runs its episodes on the nominal scene, and the stop rule, the best
    evaluation and the final success read that one: rigged so the randomised scene passes stop_at_success and the
    nominal one fails, the run does not stop."""
    calls = []

    def rigged(env, policy, episodes: int, seed: int, **_):
        rand = env.unwrapped.cfg.randomization
        calls.append((rand == nominal(rand), episodes, seed))
        return dataclasses.replace(evaluate(env, policy, episodes, seed=seed), success_rate=float(not calls[-1][0]))

    monkeypatch.setattr(loop_run, "evaluate", rigged)
    summary = json.loads(trainer.train(load_config([
        f"run_dir={tmp_path}", "randomization=robust", "loop.env_steps=200", "loop.eval_every=100",
        "loop.eval_episodes=2", "loop.final_eval_episodes=2", "demos.n_episodes=2", "loop.checkpoint_every=0",
        "profile=cpu",
    ])).read_text())  # fmt: skip
    assert summary["env_steps"] == 200  # not stopped at 100 by the randomised 1.0
    evals = [json.loads(line) for line in (tmp_path / "evals.jsonl").read_text().splitlines()]
    assert [(e["env_steps"], e["success_rate"], e["nominal_success_rate"]) for e in evals] == [
        (100, 1.0, 0.0), (200, 1.0, 0.0), (200, 1.0, 0.0)]  # fmt: skip
    assert all(e["episodes"] == e["nominal_episodes"] == 2 for e in evals)
    assert calls == [(False, 2, 1_000_000), (True, 2, 1_000_000)] * 3  # the same episodes on both scenes
    assert summary["final_success_rate"] == 0.0 and summary["final_success_rate_randomized"] == 1.0
    counters = json.loads((tmp_path / "checkpoints" / "final" / "counters.json").read_text())
    assert counters["best_eval_success"] == 0.0


def rigged_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rigged, eval_episodes: int) -> dict:
    """summary.json of a 400-step run evaluated every 100 steps by `rigged` (for `evaluate`): goal 0.9, confirmed on
    6 fresh episodes."""
    monkeypatch.setattr(loop_run, "evaluate", rigged)
    return json.loads(trainer.train(load_config([
        f"run_dir={tmp_path}", "loop.env_steps=400", "loop.eval_every=100", f"loop.eval_episodes={eval_episodes}",
        "loop.confirm_episodes=6", "loop.stop_at_success=0.9", "loop.final_eval_episodes=2", "demos.n_episodes=2",
        "loop.checkpoint_every=0", "profile=cpu",
    ])).read_text())  # fmt: skip


def test_a_crossing_ends_the_run_only_when_fresh_seeds_confirm_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rigged: every periodic evaluation passes stop_at_success, the first confirmation fails and the second holds.
    The run trains on after the first crossing, stops at the second, and its summary names both points."""
    calls = []

    def rigged(env, policy, episodes: int, seed: int, stop_at_failures: int):
        calls.append((episodes, seed, stop_at_failures))
        confirms = sum(1 for _, s, _ in calls if s != 1_000_000)
        rate = 1.0 if seed == 1_000_000 or confirms == 2 else 0.5
        return dataclasses.replace(evaluate(env, policy, 1, seed=seed), success_rate=rate, episodes=episodes)

    summary = rigged_run(tmp_path, monkeypatch, rigged, eval_episodes=2)
    assert summary["env_steps"] == 200  # trained on past the unconfirmed crossing at 100
    # a confirmation of 6 at goal 0.9 is missed at its first failure; a periodic evaluation runs whole
    assert calls == [(2, 1_000_000, 0), (6, 6_000_000, 1), (2, 1_000_000, 0), (6, 6_100_000, 1), (2, 1_000_000, 0)]
    assert [e.get("confirm", False) for e in summary["evals"]] == [False, True, False, True, False]
    reached = summary["goal_reached"]
    assert reached["goal"] == 0.9 and reached["first_crossing"]["env_steps"] == 100
    assert reached["confirmed"]["env_steps"] == 200 and reached["confirmed"]["episodes"] == 6


class ParitySeeds(gym.Env):
    """One-step episodes that succeed on even seeds."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        self.seed_ = seed
        return np.zeros(1, np.float32), {}

    def step(self, action):
        return np.zeros(1, np.float32), 0.0, True, False, {"success": self.seed_ % 2 == 0}


class Still:
    def reset(self) -> None:
        pass

    def select_action(self, obs, deterministic: bool = False) -> np.ndarray:
        return np.zeros(1, np.float32)


def test_an_evaluation_that_can_no_longer_reach_its_goal_stops_there() -> None:
    assert [failures_to_miss(0.9, 40), failures_to_miss(0.9, 10), failures_to_miss(0.95, 40)] == [5, 2, 3]
    whole = evaluate(ParitySeeds(), Still(), 10, seed=0)
    cut = evaluate(ParitySeeds(), Still(), 10, seed=0, stop_at_failures=2)
    assert (whole.episodes, whole.success_rate) == (10, 0.5)
    assert (cut.episodes, cut.success_rate) == (4, 0.5)  # seeds 0-3: its second failure ends it
    assert evaluate(ParitySeeds(), Still(), 4, seed=0, stop_at_failures=3).episodes == 4


def test_an_evaluation_mostly_aborted_neither_crosses_nor_confirms(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rigged, every rate 1.0: a periodic evaluation that scored 1 episode and gave up on 3 (a robot that kept
    stopping) is no crossing, and a confirmation that scored 2 of 6 confirms nothing; conclusive ones do."""
    scored = iter([(1, 3), (2, 0), (2, 4), (2, 0), (6, 0), (2, 0)])  # (scored, aborted) per call; the last: final

    def rigged(env, policy, episodes: int, seed: int, **_):
        n, aborted = next(scored)
        result = evaluate(env, policy, 1, seed=seed)
        return dataclasses.replace(result, success_rate=1.0, episodes=n, aborted_episodes=aborted)

    summary = rigged_run(tmp_path, monkeypatch, rigged, eval_episodes=4)
    assert summary["env_steps"] == 300  # 100: inconclusive; 200: crossed, confirmation inconclusive; 300: confirmed
    reached = summary["goal_reached"]
    assert reached["first_crossing"]["env_steps"] == 200 and reached["confirmed"]["env_steps"] == 300


def test_resume_after_sigkill(tmp_path: Path) -> None:
    run = tmp_path / "run"
    args = [
        sys.executable,
        "-m",
        "robot_rl.cli",
        "train",
        f"run_dir={run}",
        "loop.env_steps=900",
        "loop.checkpoint_every=300",
        "loop.eval_every=300",
        "loop.eval_episodes=2",
        "loop.stop_at_success=2",
        "loop.final_eval_episodes=3",
        "demos.n_episodes=5",
        "profile=cpu",
    ]
    env = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    latest, evals = run / "checkpoints" / "latest", run / "evals.jsonl"
    deadline = time.time() + 240
    while not (evals.exists() and evals.read_text()) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.1)  # the first eval comes right after the first checkpoint
    assert latest.exists() and evals.read_text(), "no checkpoint and eval before the kill"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = json.loads((run / "checkpoints" / latest.read_text() / "counters.json").read_text())
    assert killed_at["env_steps"] < 900 and not (run / "summary.json").exists()
    before_kill = [json.loads(line) for line in evals.read_text().splitlines()]
    committed = [e for e in before_kill if e["updates"] <= killed_at["updates"]]

    out = subprocess.run(
        [sys.executable, "-m", "robot_rl.cli", "train", f"resume={run}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert f"{killed_at['env_steps']} env steps" in out.stdout
    summary = json.loads((run / "summary.json").read_text())
    assert summary["env_steps"] == 900 and summary["updates"] == 900
    assert summary["demo_episodes"] == 5  # the demo store was reused, not re-collected
    # The curve survives the kill: evals up to the checkpoint are kept, the redone stretch is not doubled.
    steps = [e["env_steps"] for e in summary["evals"]]
    assert committed and summary["evals"][: len(committed)] == committed
    assert steps[:-1] == sorted(set(steps[:-1])) and steps[-2:] == [900, 900]  # ... 900, then the final eval
    final = json.loads((run / "checkpoints" / "final" / "counters.json").read_text())
    assert final["wall_clock_s"] >= killed_at["wall_clock_s"]
    assert final["startup_s"] > killed_at["startup_s"] > 0  # the resumed session's start-up counts as well


def test_the_time_budget_counts_the_start_up(tmp_path: Path) -> None:
    """`loop.max_minutes` is the whole run's: making the env, collecting demos and building the learner spend it too,
    so a budget the start-up alone outlasts trains nothing."""
    from robot_rl.loop.trainer import train

    summary = json.loads(train(load_config([f"run_dir={tmp_path}", "loop.max_minutes=0.001", "demos.n_episodes=3",
                                            "loop.final_eval_episodes=1", "loop.checkpoint_every=0",
                                            "profile=cpu"])).read_text())  # fmt: skip
    assert summary["startup_s"] > 0.06 and summary["env_steps"] == 0


class NaNPolicy(torch.nn.Module):
    def select_action(self, obs, deterministic: bool = False) -> np.ndarray:
        return np.array([0.1, np.nan, 0.0, 1.0], np.float32)

    def reset(self) -> None:
        pass


def test_nan_action_is_caught_before_the_simulator() -> None:
    env = make_env(EnvConfig(), seed=0)
    actor = Actor(env, NaNPolicy())
    with pytest.raises(ValueError, match="NaN"):
        actor.step()
    assert env.unwrapped.data.time == 0.0  # no physics step happened


def test_overlapped_updates_run_in_a_thread_beside_the_actor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`loop.overlap=true`: updates run in the learner thread while the actor steps, at the same UTD rate limit;
    the checkpoints and the summary hold every update due."""
    import threading

    from robot_rl.config import load_config
    from robot_rl.loop.learner import Learner
    from robot_rl.loop.trainer import train

    spans: dict[str, list[tuple[float, float]]] = {"update": [], "step": []}
    threads: set[str] = set()

    def timed(kind: str, fn):  # noqa: ANN001, ANN202
        def wrapper(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            t = time.perf_counter()
            out = fn(*args, **kwargs)
            spans[kind].append((t, time.perf_counter()))
            if kind == "update":
                threads.add(threading.current_thread().name)
            return out

        return wrapper

    monkeypatch.setattr(Learner, "update", timed("update", Learner.update))
    monkeypatch.setattr(Actor, "step", timed("step", Actor.step))
    summary = train(load_config([f"run_dir={tmp_path}", "loop.overlap=true", "loop.env_steps=150", "loop.eval_every=0",
                                 "loop.final_eval_episodes=2", "demos.n_episodes=2", "loop.checkpoint_every=100",
                                 "profile=cpu"]))  # fmt: skip
    s = json.loads(summary.read_text())
    assert s["env_steps"] == 150 and s["updates"] == 150  # the rate limit held; the last updates were waited for
    assert threads and all(name.startswith("learner") for name in threads)
    steps = spans["step"]
    assert any(a < d and c < b for a, b in spans["update"] for c, d in steps)  # an update and an env step at once
    counters = json.loads((tmp_path / "checkpoints" / "step_00000100" / "counters.json").read_text())
    assert counters["env_steps"] == 100 and counters["updates"] == 99  # saved between steps: one update to come


def test_no_evaluation_while_the_policy_has_not_changed(tmp_path: Path) -> None:
    """Before `learning_starts` the weights stay as they were: evaluations that would re-measure them are skipped
    (on a robot they would spend arm time on a known result), and the first after the updates start runs."""
    from robot_rl.loop.trainer import train

    train(load_config([f"run_dir={tmp_path}", "loop.env_steps=80", "loop.learning_starts=60", "loop.eval_every=20",
                       "loop.eval_at_start=true", "loop.eval_episodes=1", "loop.final_eval_episodes=1",
                       "demos.n_episodes=2", "loop.checkpoint_every=0", "profile=cpu"]))  # fmt: skip
    evals = [json.loads(line) for line in (tmp_path / "evals.jsonl").read_text().splitlines()]
    assert [(e["env_steps"], e["updates"]) for e in evals][:2] == [(0, 0), (80, 20)]


def test_a_sim_run_rewarded_by_a_classifier_is_judged_by_the_simulator(tmp_path: Path) -> None:
    """reward.source=classifier in sim: the actor's reward is the classifier's, the evaluations judge success by the
    simulator's own check (a sim cell has no classifier judge). The evaluation env was once built with the reward
    wrapper and no classifier yet, and the run died at start-up."""
    from robot_rl.loop.trainer import train

    summary = train(load_config([f"run_dir={tmp_path}", "reward.source=classifier", "reward.classifier_steps=20",
                                 "loop.env_steps=40", "loop.eval_every=0", "loop.final_eval_episodes=1",
                                 "demos.n_episodes=2", "loop.checkpoint_every=0", "profile=cpu"]))  # fmt: skip
    result = json.loads(summary.read_text())
    assert result["reward_source"] == "classifier" and result["env"] == "PandaEnv"
    assert result["final_success_rate"] is not None
