"""A cell with no success topic, as a real one (#28): RobotEnv steps without one, an operator button that publishes
only when pressed is never stale, and a classifier or a person's key judges success in training, evaluation and
`deploy`. In-process (inproc transport) except the training run, which steps a lockstep sim robot process."""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
from real_util import inproc_robot, spawn, stop
from test_robot import Served, layout

from robot_rl.algos.reward_classifier import ClassifierReward, RewardClassifier, save_classifier
from robot_rl.checkpoint import Checkpoint
from robot_rl.config import load_config
from robot_rl.demos.teleop import DeviceCommand
from robot_rl.errors import ConfigError, UserError
from robot_rl.loop.run import reward_source
from robot_rl.real import msgs
from robot_rl.real.config import load_robot_config
from robot_rl.real.deploy import deploy
from robot_rl.real.robot import RobotEnv, proprio_layout
from robot_rl.types import ObsLayout

pytestmark = pytest.mark.realtime


@pytest.fixture
def robot_cfg():
    return inproc_robot()


def classifier(state_layout: dict, says: bool) -> RewardClassifier:
    """One that calls every frame a success (`says`) or none: its threshold is below or above any probability."""
    clf = RewardClassifier(max(b for _, b in state_layout.values()))
    clf.threshold.fill_(-1.0 if says else 2.0)
    return clf.eval()


def test_without_a_success_topic_robot_env_steps_and_the_classifier_is_the_verdict(robot_cfg) -> None:
    served = Served(robot_cfg)  # it still publishes the simulator's check: nothing on this side reads it
    env = RobotEnv(dataclasses.replace(robot_cfg, success_topic=""), ObsLayout.from_slices(layout(), control_hz=20.0))
    try:
        env.reset(seed=1)
        info = env.step(np.zeros(4))[4]
        assert not env.judges_success and info["success"] is False
        judged = ClassifierReward(env, classifier(env.obs_layout.state, says=True))
        judged.reset(seed=2)
        _, reward, terminated, truncated, info = judged.step(np.zeros(4))
        assert (reward, terminated, truncated, info["success"]) == (1.0, True, False, True)
    finally:
        env.close()
        served.close()


def test_an_event_success_topic_is_never_stale_and_a_press_counts_for_its_episode_only(robot_cfg) -> None:
    served = Served(robot_cfg)
    button = served.tx.publisher("operator/success", msgs.BOOL)
    cfg = dataclasses.replace(robot_cfg, success_topic="operator/success", success_event=True)
    env = RobotEnv(cfg, ObsLayout.from_slices(layout(), control_hz=20.0))
    try:
        env.reset(seed=1)
        for _ in range(3):  # silent for longer than any staleness limit: no StaleDataError
            assert env.step(np.zeros(4))[2:4] == (False, False)
            time.sleep(0.05)
        button.publish(msgs.scalar(msgs.BOOL, True))
        _, reward, terminated, _, info = env.step(np.zeros(4))
        assert env.judges_success and terminated and reward == 1.0 and info["success"]
        _, info = env.reset(seed=2)
        assert not info["success"] and not env.step(np.zeros(4))[4]["success"]
    finally:
        env.close()
        served.close()


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A few-step PickCube state run: a checkpoint to deploy (what it learned does not matter here)."""
    from robot_rl.loop.trainer import train

    run = tmp_path_factory.mktemp("sim_run")
    train(load_config([f"run_dir={run}", "loop.env_steps=10", "loop.eval_every=0", "loop.final_eval_episodes=1",
                       "loop.checkpoint_every=0", "demos.n_episodes=1", "profile=cpu", "threads=1"]))  # fmt: skip
    return run


class Presses:
    """A teleop device whose success key goes down at its `at`-th poll of each episode."""

    name, source = "test", "teleop"

    def __init__(self, at: int) -> None:
        self.at, self.polls = at, 0

    def reset(self) -> None:
        self.polls = 0

    def poll(self, env) -> DeviceCommand:
        self.polls += 1
        events = frozenset({"success"}) if self.polls == self.at else frozenset()
        return DeviceCommand(np.zeros(6, np.float32), -1.0, False, events)

    def close(self) -> None:
        pass


def test_deploy_without_a_success_topic_is_judged_by_the_runs_classifier_else_a_key_else_says_what_to_set(
    robot_cfg, sim_run: Path, tmp_path: Path
) -> None:
    cfg = dataclasses.replace(robot_cfg, success_topic="")
    with pytest.raises(UserError, match="no success_topic .* saved no reward classifier.*--teleop"):
        deploy(Checkpoint(sim_run), cfg, 1, status=False)
    served = Served(robot_cfg)
    try:
        keyed = deploy(Checkpoint(sim_run), cfg, 2, device=Presses(at=4), status=False)
        run = tmp_path / "run"  # the same run, now with a classifier saved beside its checkpoints
        shutil.copytree(sim_run / "checkpoints", run / "checkpoints")
        lay = Checkpoint(run).layouts["env"]
        meta = {"state_layout": {k: list(v) for k, v in lay.state.items()}, "cameras": [], "image_size": 0}
        save_classifier(classifier(lay.state, says=True), run / "reward_classifier.safetensors", meta)
        judged = deploy(Checkpoint(run), cfg, 2, status=False)
    finally:
        served.close()
    assert keyed["success_judge"] == "success key" and keyed["success_rate"] == 1.0
    assert [e["steps"] for e in keyed["per_episode"]] == [3, 3]  # ended at the press, before a 4th step
    assert judged["success_judge"].startswith("classifier") and judged["success_rate"] == 1.0
    assert [e["steps"] for e in judged["per_episode"]] == [1, 1]  # the sim's own check never saw a lift


def test_a_robot_run_without_a_success_topic_needs_a_classifier_and_the_simulated_operator_never_rewards() -> None:
    with pytest.raises(ConfigError, match="no success_topic, so nothing says when an episode succeeded"):
        load_config(["robot=sim", "robot.success_topic=", "intervention.device=keyboard"])
    base = ["robot=sim", "reward.source=classifier", "reward.classifier_path=c.safetensors"]
    sim_op = load_config([*base, "intervention.device=simulated"])
    assert not sim_op.keys_count and reward_source(sim_op) == "classifier"
    said = load_config([*base, "intervention.device=simulated", "intervention.success_from_sim=true"])
    assert said.keys_count and "the simulated operator's keys (the sim's success topic)" in reward_source(said)
    person = load_config([*base, "robot.success_topic=", "intervention.device=keyboard"])
    assert person.keys_count and reward_source(person) == "classifier + operator keys"
    with pytest.raises(ConfigError, match="success_from_sim .* needs intervention.device=simulated"):
        load_config([*base, "intervention.device=keyboard", "intervention.success_from_sim=true"])


@pytest.mark.parametrize("operator", ["oracle", "person"])
def test_training_and_its_evaluations_without_a_success_topic_are_judged_by_the_classifier_in_robot_minutes(
    domain: int, tmp_path: Path, operator: str
) -> None:
    """The classifier calls every frame a success, the sim robot's own check never would: every evaluation episode
    ends at its first step as a success. Evaluations run as many episodes as fit in their robot-minutes. The
    simulated operator watches (its eyes still read the sim's check, which the run's config does not name), an
    oracle or a person, as the summary says."""
    robot = load_robot_config("sim")
    lay = proprio_layout(robot)
    clf_path, run = tmp_path / "clf.safetensors", tmp_path / "run"
    meta = {"state_layout": {k: [s.start, s.stop] for k, s in lay.items()}, "cameras": [], "image_size": 0}
    save_classifier(classifier({k: (s.start, s.stop) for k, s in lay.items()}, says=True), clf_path, meta)
    sim = spawn("sim-robot", "--lockstep", "--domain", str(domain))
    try:
        tr = spawn("train", "robot=sim", "robot.lockstep=true", f"robot.domain_id={domain}", "robot.success_topic=",
                   "robot.reset=home", "robot.scene_reset=topic", "robot.home_box=[0.03,0.03,0.0]",
                   "intervention.device=simulated", f"intervention.operator={operator}", "threads=1",
                   "reward.source=classifier",
                   f"reward.classifier_path={clf_path}", "loop.env_steps=30", "loop.eval_every=15",
                   "loop.eval_episodes=5", "loop.eval_robot_minutes=0.01", "loop.final_eval_episodes=5",
                   "loop.final_eval_robot_minutes=0.25", "loop.stop_at_success=2", "loop.checkpoint_every=0",
                   f"run_dir={run}")  # fmt: skip
        _, err = tr.communicate(timeout=120)
        assert tr.returncode == 0, err[-3000:]
    finally:
        stop(sim)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["success_judge"] == "classifier" and summary["reward_source"] == "classifier"
    assert summary["operator"] == operator
    # 0.01 min fits no 5 s episode (one runs), 0.25 min fits three; each lasts one step
    assert [(e["episodes"], e["success_rate"], e["mean_length"]) for e in summary["evals"]] == [
        (1, 1.0, 1.0), (1, 1.0, 1.0), (3, 1.0, 1.0)]  # fmt: skip
    # the arm's time whole: each answered command one control period, the home moves (a drawn home each reset)
    assert summary["robot_minutes_training"] == round(30 / 10 / 60, 3)
    assert summary["robot_minutes_evaluation"] == round(5 / 10 / 60, 3)
    assert summary["evals"][-1]["robot_minutes_evaluation"] == summary["robot_minutes_evaluation"]
    assert summary["robot_minutes_resets"] > 0 and summary["robot_minutes_demos"] == 0
    parts = sum(summary[f"robot_minutes_{k}"] for k in ("training", "evaluation", "demos", "resets"))
    assert summary["robot_minutes_whole"] == pytest.approx(parts, abs=0.002)
