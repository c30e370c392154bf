"""A person's verdicts on what the classifier paid for refit it (`loop.classifier.Refits`, HIL-SERL's practice for
false positives): a classifier trained on a store whose failures are all far from the goal pays for hovering just
above it, as the PegInsert robot run's did (#29); judged "no" by the person, those frames stop paying, the store's
successes keep paying, and a resumed run keeps the verdicts."""

from __future__ import annotations

import dataclasses
from collections import deque
from pathlib import Path

import numpy as np
import pytest
import torch

from robot_rl.algos.reward_classifier import ClassifierReward, load_classifier, success_probs
from robot_rl.config import TrainConfig
from robot_rl.demos.store import EpisodeStore
from robot_rl.envs import make_env
from robot_rl.loop.classifier import Refits, pack_verdicts, train_classifier
from robot_rl.sim.config import EnvConfig

INSERTED, HOVER = (0.060, 0.070), (0.088, 0.094)  # TCP heights: the store has no frame at hovering height


def _frames(rng: np.random.Generator, z: tuple[float, float], n: int) -> np.ndarray:
    tcp = np.column_stack([rng.uniform(0.5, 0.6, n), rng.uniform(-0.05, 0.05, n), rng.uniform(*z, n)])
    return tcp.astype(np.float32)


def _store(path: Path) -> Path:
    rng = np.random.default_rng(0)
    with EpisodeStore(path, "w") as st:
        for _ in range(8):
            state = np.concatenate([_frames(rng, (0.13, 0.2), 20), _frames(rng, INSERTED, 5)])
            label = np.arange(25) >= 20
            st.add_episode({"state": state, "label": label}, {"state_layout": {"tcp_pos": [0, 3]}, "cameras": []})
    return path


def _cfg(run_dir: Path, resume: bool = False) -> TrainConfig:
    cfg = TrainConfig()
    reward = dataclasses.replace(cfg.reward, source="classifier", refit_every=20, refit_steps=300)
    return dataclasses.replace(cfg, reward=reward, run_dir=str(run_dir), resume=str(run_dir) if resume else "")


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("refits")
    clf = tmp / "clf.safetensors"
    train_classifier(_store(tmp / "labels"), clf, steps=300, max_fpr=0.0)
    return clf


def _probs(clf, z: tuple[float, float], seed: int) -> np.ndarray:
    return success_probs(clf, {"state": _frames(np.random.default_rng(seed), z, 50)})


def test_verdicts_on_paid_hovering_frames_refit_the_classifier(trained: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    live, _ = load_classifier(trained)
    (run_dir / "reward_classifier.safetensors").write_bytes(trained.read_bytes())  # as `run_classifier` copies it
    thr = float(live.threshold)
    paid_before = (_probs(live, HOVER, 1) > thr).mean()
    assert paid_before > 0.5, paid_before  # the failure the person sees: hovering is paid for

    refits = Refits(_cfg(run_dir), run_dir, live)
    wrapper = ClassifierReward(make_env(EnvConfig(), seed=0), live)
    refits.serve(wrapper)
    judged: deque = refits.judged
    for s in _frames(np.random.default_rng(2), HOVER, 19):  # the actor's frame: more keys than the store's
        judged.append(({"state": s, "front": np.zeros(1)}, False, True))
    assert not refits.due(updates=0)
    judged.append(({"state": _frames(np.random.default_rng(3), INSERTED, 1)[0]}, True, True))
    assert refits.due(updates=0)

    rates = refits.refit(updates=50)
    assert wrapper.clf is refits.clf is not live and float(refits.clf.threshold) == thr
    assert rates["false_positive_rate"] == 0.0 and rates["recall"] == 1.0, rates
    paid_after = (_probs(refits.clf, HOVER, 4) > thr).mean()  # hovering frames it was not refitted on
    assert paid_after < 0.1 < paid_before, (paid_after, paid_before)
    assert (_probs(refits.clf, INSERTED, 5) > thr).mean() > 0.9
    assert refits.counts() == {"classifier_paid_judged": 20, "classifier_false_positives": 19,
                              "classifier_missed_successes": 0, "classifier_refits": 1}  # fmt: skip
    assert not refits.due(updates=10_000)

    saved, meta = load_classifier(run_dir / "reward_classifier.safetensors")
    assert meta["refits"] == 1 and (_probs(saved, HOVER, 4) > thr).mean() == paid_after
    again = Refits(_cfg(run_dir, resume=True), run_dir, saved)
    assert again.counts() == refits.counts()
    for s in _frames(np.random.default_rng(6), HOVER, 20):
        judged.append(({"state": s}, False, True))
    # 20 new verdicts, but the learner must first make as many updates as a refit takes steps (300 here)
    assert not refits.due(updates=50 + 299) and refits.due(updates=50 + 300)


def test_a_classifier_without_its_store_cannot_be_refitted(trained: Path, tmp_path: Path) -> None:
    from robot_rl.algos.reward_classifier import classifier_meta, save_classifier
    from robot_rl.errors import UserError

    clf, meta = load_classifier(trained)
    save_classifier(clf, tmp_path / "reward_classifier.safetensors", {**meta, "report": {}})
    with pytest.raises(UserError, match="refits the classifier on the frames it was trained on"):
        Refits(_cfg(tmp_path), tmp_path, clf)
    assert "report" in classifier_meta(trained)


class _Person:
    """A teleop device whose success key goes down at the `press_at`-th poll (None: never)."""

    name, source = "fake", "teleop"

    def __init__(self, press_at: int | None) -> None:
        self.press_at, self.polls = press_at, 0

    def reset(self) -> None:
        self.polls = 0

    def poll(self, env):
        from robot_rl.demos.teleop import DeviceCommand

        self.polls += 1
        return DeviceCommand(events=frozenset({"success"}) if self.polls == self.press_at else frozenset())

    def close(self) -> None: ...


def test_a_person_gets_verdict_s_to_say_yes_and_silence_is_a_no() -> None:
    import time

    from robot_rl.loop.human import DeviceIntervener

    slow = DeviceIntervener(_Person(press_at=5), verdict_s=2.0)
    assert slow.judge(None) and slow.device.polls == 5  # pressed after four looks (~0.1 s): yes, no more waiting
    t = time.monotonic()
    silent = DeviceIntervener(_Person(press_at=None), verdict_s=0.2)
    assert not silent.judge(None) and 0.2 <= time.monotonic() - t < 1.0
    at_once = DeviceIntervener(_Person(press_at=2), verdict_s=0.0)  # the simulated operator: one look
    assert not at_once.judge(None) and at_once.device.polls == 1
    at_once.reset()
    assert not at_once.label


class _Still:
    """A policy that holds still."""

    def select_action(self, obs) -> np.ndarray:
        return np.zeros(4, np.float32)

    def reset(self) -> None: ...


@pytest.mark.parametrize("press_at", [None, 2])
def test_a_frame_the_person_calls_no_success_is_not_paid(press_at: int | None) -> None:
    """The classifier pays every frame; the person looks once after the step (poll 2: the step's own poll is 1)."""
    from robot_rl.algos.reward_classifier import RewardClassifier
    from robot_rl.loop.actor import Actor
    from robot_rl.loop.human import DeviceIntervener

    env = make_env(EnvConfig(), seed=0)
    clf = RewardClassifier(env.observation_space["state"].shape[0])
    clf.threshold.fill_(-1.0)
    actor = Actor(ClassifierReward(env, clf.eval()), _Still(), DeviceIntervener(_Person(press_at)))
    actor.judged = deque()
    t = actor.step()
    said = press_at is not None
    assert [(y, paid) for _, y, paid in actor.judged] == [(said, True)]
    assert (t.reward, t.terminated, t.truncated) == ((1.0, True, False) if said else (0.0, False, True))
    assert actor.stats.episodes == 1 and actor.last_episode.success is False  # the sim's own check: no lift
    env.close()


@pytest.mark.parametrize("press_at", [None, 1])
def test_a_success_key_on_a_frame_the_classifier_did_not_pay_is_a_verdict(press_at: int | None) -> None:
    """The classifier pays nothing; the person's success key (poll 1: the step's own look, at the frame before the
    step) is a yes on that frame. The keys do not count here (the bench's simulated person): no reward, no end."""
    from robot_rl.algos.reward_classifier import RewardClassifier
    from robot_rl.loop.actor import Actor
    from robot_rl.loop.human import DeviceIntervener

    env = make_env(EnvConfig(), seed=0)
    clf = RewardClassifier(env.observation_space["state"].shape[0])
    clf.threshold.fill_(2.0)  # above any probability
    actor = Actor(ClassifierReward(env, clf.eval()), _Still(), DeviceIntervener(_Person(press_at), keys=False))
    actor.judged = deque()
    t = actor.step()
    assert [(y, paid, o is t.obs) for o, y, paid in actor.judged] == ([] if press_at is None else [(True, False, True)])
    assert (t.reward, t.done) == (0.0, False)
    env.close()


def test_verdicts_on_missed_successes_refit_the_classifier_to_pay_them(trained: Path, tmp_path: Path) -> None:
    """Successes where the store showed none (TCP high, as its failures, but 15-20 cm further out) are missed; twenty
    yes verdicts on them and the refitted classifier pays such frames, and still not the store's failures."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    live, _ = load_classifier(trained)
    (run_dir / "reward_classifier.safetensors").write_bytes(trained.read_bytes())

    def far(seed: int) -> np.ndarray:
        return _frames(np.random.default_rng(seed), (0.13, 0.2), 50) + np.float32([0.15, 0.0, 0.0])

    thr = float(live.threshold)
    assert (success_probs(live, {"state": far(1)}) > thr).mean() < 0.1
    refits = Refits(_cfg(run_dir), run_dir, live)
    for s in far(2)[:20]:
        refits.judged.append(({"state": s}, True, False))
    refits.refit()
    assert refits.counts()["classifier_missed_successes"] == 20
    assert (success_probs(refits.clf, {"state": far(4)}) > thr).mean() > 0.9
    assert (_probs(refits.clf, (0.13, 0.2), 5) > thr).mean() < 0.05


def test_a_fleets_verdicts_refit_the_classifier_every_actor_then_pays_by(trained: Path, tmp_path: Path) -> None:
    """On a fleet the verdicts arrive with the actors' episode summaries (`take_episodes`), the learner node
    refits, and the refitted classifier travels with the policy weights (`Publishing`, `Refits.actor_weights`) into
    the classifier an actor node's reward wrapper pays by (`actor_node.load_weights`)."""
    from types import SimpleNamespace

    from robot_rl.algos.sac import SACConfig, make_policy
    from robot_rl.loop.actor import Actor, EpisodeStats
    from robot_rl.loop.run import RunState, take_episodes
    from robot_rl.nodes.actor_node import load_weights
    from robot_rl.nodes.learner_node import Publishing
    from robot_rl.types import ObsLayout

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "reward_classifier.safetensors").write_bytes(trained.read_bytes())
    refits = Refits(_cfg(run_dir), run_dir, load_classifier(trained)[0])
    lay = ObsLayout.of_env(make_env(EnvConfig(), seed=0))
    learner_policy = make_policy(SACConfig(), lay.state_dim, lay.action_dim)
    sent: list = []
    learner = SimpleNamespace(refits=refits, learner=SimpleNamespace(updates=0, policy_weights=lambda: {
        k: v.clone() for k, v in learner_policy.state_dict().items()}))  # fmt: skip
    publish = Publishing(SimpleNamespace(publish=lambda w, v: sent.append((w, v))), learner, every=10)
    assert not any(k.startswith("classifier.") for k in sent[-1][0])  # none refitted yet: actors hold the file's

    hovering = [({"state": s}, False, True) for s in _frames(np.random.default_rng(2), HOVER, 19)]
    inserted = [({"state": _frames(np.random.default_rng(3), INSERTED, 1)[0]}, True, True)]
    summaries = [{"actor_id": f"actor{i}", "success": i == 1, "length": 30, "interventions": 0,
                  "verdicts": pack_verdicts(v)} for i, v in enumerate((hovering, inserted))]  # fmt: skip
    no_verdicts = {k: v for k, v in summaries[0].items() if k != "verdicts"}
    take_episodes(RunState(), [*summaries, no_verdicts], EpisodeStats(), refits)
    assert refits.due(updates=0)
    refits.refit(updates=0)
    learner.learner.updates = 10
    publish()

    on_arm = load_classifier(trained)[0]  # what an actor node loaded from reward.classifier_path
    wrapper = ClassifierReward(make_env(EnvConfig(), seed=0), on_arm)
    actor = Actor(wrapper, make_policy(SACConfig(), lay.state_dim, lay.action_dim))
    thr = float(on_arm.threshold)
    assert (_probs(wrapper.clf, HOVER, 4) > thr).mean() > 0.5  # it pays for hovering
    load_weights(actor, on_arm, *sent[-1])
    assert actor.policy_version == 10
    assert all(torch.equal(a, b) for a, b in zip(actor.policy.state_dict().values(),
                                                 learner_policy.state_dict().values(), strict=True))  # fmt: skip
    assert np.array_equal(_probs(wrapper.clf, HOVER, 4), _probs(refits.clf, HOVER, 4))
    assert (_probs(wrapper.clf, HOVER, 4) > thr).mean() < 0.1  # the person's no reached this arm


def test_unreadable_verdicts_cost_only_themselves(capsys: pytest.CaptureFixture[str]) -> None:
    """Bytes that are no verdicts npz (a truncated or foreign attachment) are dropped in one line; the episode still
    counts and the next actor's verdicts are taken."""
    from types import SimpleNamespace

    from robot_rl.loop.actor import EpisodeStats
    from robot_rl.loop.run import RunState, take_episodes

    good = pack_verdicts([({"state": np.zeros(7, np.float32)}, True, True)])
    refits, stats = SimpleNamespace(judged=deque()), EpisodeStats()
    summary = {"actor_id": "actor0", "episode": 3, "success": False, "length": 30, "interventions": 0}
    bad = [good[: len(good) // 2], b"not an npz", pack_verdicts([({"state": np.zeros(7)}, True, True)])[:40]]
    take_episodes(RunState(), [{**summary, "verdicts": b} for b in bad] + [{**summary, "verdicts": good}], stats,
                  refits)  # fmt: skip
    assert stats.episodes == 4 and len(refits.judged) == 1
    assert capsys.readouterr().err.count("actor0: unreadable verdicts dropped with episode 3") == 3
