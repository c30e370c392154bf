"""The HIL-SERL loop on the robot, short (bench/bench_robot_loop.py is the long one), against a lockstep sim robot
process over ROS 2: labelled demos by the simulated operator, a classifier from them, then a run whose reward is that
classifier alone while the simulated operator intervenes through the teleop device interface."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from real_util import spawn, stop
from safetensors import safe_open

from robot_rl.algos.reward_classifier import classifier_meta
from robot_rl.demos.store import EpisodeStore
from robot_rl.envs import PRIVILEGED_FIELDS

STEPS = 120


def run(*args: str, timeout: float = 120) -> str:
    p = spawn(*args)
    out, err = p.communicate(timeout=timeout)
    assert p.returncode == 0, err[-3000:]
    return out


def test_labelled_frames_train_a_classifier_that_alone_rewards_a_run_with_the_operator_intervening(
    domain: int, tmp_path: Path
) -> None:
    store, clf, run_dir = tmp_path / "demos", tmp_path / "clf.safetensors", tmp_path / "run"
    sim = spawn("sim-robot", "--lockstep", "--domain", str(domain))
    try:
        run("collect", str(store), "--backend", "robot", "--robot", "sim", "--domain", str(domain), "--robot-set",
            "lockstep=true", "-n", "5", "--device", "simulated", "--label-frames", "6", "--wander", "8",
            "--obs", "state", "--no-fsync")  # fmt: skip
        report = json.loads(run("classifier", "train", str(store), str(clf), "--steps", "300", "--max-fpr", "0.05"))
        run("train", "robot=sim", "robot.lockstep=true", f"robot.domain_id={domain}", "threads=1",
            f"demos.path={store}", "reward.source=classifier", f"reward.classifier_path={clf}", "reward.keys=false",
            "intervention.device=simulated", "intervention.trigger=no_progress", f"loop.env_steps={STEPS}",
            "loop.eval_every=0", "loop.final_eval_episodes=1", f"run_dir={run_dir}")  # fmt: skip
    finally:
        stop(sim)
    # The operator's verdict per frame: off, then on from its success key for the 6 held steps.
    with EpisodeStore(store) as st:
        for i in range(len(st)):
            label, meta = st.episode(i)["label"], st.meta(i)
            assert meta["success_label"] == "operator" and label.sum() == 6 and label[-6:].all(), label
            assert not label[0] and meta["success"]
    # Classifier quality on the held-out test episode, at the threshold picked on the validation episode.
    test = report["test"]
    assert report["episodes"]["test"] and test["recall"] >= 0.5 and test["false_positive_rate"] <= 0.25, report
    assert not set(classifier_meta(clf)["state_layout"]) & set(PRIVILEGED_FIELDS)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["reward_source"] == "classifier"
    state = summary["obs_layout"]["state"]
    assert state == classifier_meta(run_dir / "reward_classifier.safetensors")["state_layout"]
    assert not set(state) & set(PRIVILEGED_FIELDS)  # nothing the policy reads is an object pose
    with safe_open(str(run_dir / "checkpoints" / "final" / "model.safetensors"), "pt") as f:
        assert f.get_slice("policy.encoder.state_mean").get_shape()[-1] == 23
    # The operator took over through the device; each of its steps went to both buffers (demo: after the demos).
    bufs = {}
    for name in ("online", "demo"):
        with np.load(run_dir / "checkpoints" / "final" / f"buffer_{name}.npz") as b:
            bufs[name] = {k: b[f"step.{k}"][b["valid"]] for k in ("intervened", "reward", "terminated")}
    intervened = round(summary["intervention_rate"] * STEPS)
    assert intervened > 0 and bufs["online"]["intervened"].sum() == intervened == bufs["demo"]["intervened"].sum()
    # The demos' rewards are the classifier's: a demo ends at its first detected success, with reward 1.
    demo = bufs["demo"]["intervened"] == 0
    rewards, terminal = bufs["demo"]["reward"][demo], bufs["demo"]["terminated"][demo]
    assert rewards.sum() == terminal.sum() >= 1 and set(np.unique(rewards)) <= {0.0, 1.0}
