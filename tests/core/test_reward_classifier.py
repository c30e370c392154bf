"""The learned success detector: trained on scripted frames it separates success from the rest, and the
wrapper turns its verdict into reward and termination while keeping the env's truth in info."""

import dataclasses

import numpy as np
import torch

from robot_rl.algos.reward_classifier import (
    ClassifierReward,
    RewardClassifier,
    classifier_metrics,
    record_classifier_data,
    train_reward_classifier,
)
from robot_rl.envs import make_env
from robot_rl.sim.config import EnvConfig
from robot_rl.sim.experts import ScriptedExpert


def test_classifier_learns_success_and_drives_reward() -> None:
    torch.manual_seed(0)
    cfg = EnvConfig(terminate_on_success=False, max_episode_steps=25)
    env = make_env(cfg, seed=0)
    expert = ScriptedExpert(noise_std=0.1, seed=0)
    data = record_classifier_data(env, expert.act, episodes=12, seed=0)
    assert 0.1 < data.labels.mean() < 0.9
    train, val = data.split(0.25, seed=0)
    clf = RewardClassifier(state_dim=data.obs["state"].shape[1])
    untrained = classifier_metrics(clf, val)
    train_reward_classifier(clf, train, steps=400, seed=0)
    m = classifier_metrics(clf, val)
    assert m["accuracy"] > 0.9 and m["accuracy"] > untrained["accuracy"], (m, untrained)

    wrapped = ClassifierReward(make_env(dataclasses.replace(cfg), seed=1), clf)
    wrapped.reset(seed=123)
    agree, done = [], False
    while not done:
        _, r, term, trunc, info = wrapped.step(expert.act(wrapped))
        agree.append((r > 0) == info["success"])
        assert "classifier_prob" in info
        done = term or trunc
    assert np.mean(agree) > 0.8
    assert term and r == 1.0  # the classifier, not the env, ended the episode on success


def test_the_threshold_caps_false_positives_and_sits_mid_gap() -> None:
    from robot_rl.algos.reward_classifier import pick_threshold, rates_at

    probs = np.array([0.001, 0.004, 0.2, 0.6, 0.9, 0.95])
    labels = np.array([0, 0, 0, 0, 1, 1.0])
    thr = pick_threshold(probs, labels, max_fpr=0.0)
    assert thr == 0.75 and rates_at(probs, labels, thr)["false_positive_rate"] == 0.0
    # One negative in four may pass at 25 %: the threshold drops below 0.6, recall stays whole.
    thr = pick_threshold(probs, labels, max_fpr=0.25)
    assert 0.2 < thr < 0.6 and rates_at(probs, labels, thr) == {
        "accuracy": 5 / 6, "precision": 2 / 3, "recall": 1.0, "false_positive_rate": 0.25, "positives": 2,
        "negatives": 4,
    }  # fmt: skip


def test_episodes_split_three_ways_without_overlap() -> None:
    from robot_rl.demos.dataset import split_episodes

    tr, va, te = split_episodes(10, 0.2, seed=0, test_fraction=0.2)
    assert (len(tr), len(va), len(te)) == (6, 2, 2) and sorted(tr + va + te) == list(range(10))
    assert all(len(p) == 1 for p in split_episodes(3, 0.2, seed=1, test_fraction=0.2))
    assert split_episodes(10, 0.2, seed=0)[1] == te  # the same seed: test first, then val, from one permutation
