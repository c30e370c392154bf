"""A success classifier (`robot-rl classifier train | eval`) from frames a person labelled, for robot runs.

Frames come from a store recorded with `collect --label-frames N` (rows carry `label`, the operator's verdict on
that row's observation). The classifier reads what a robot run's policy reads: the cameras and the proprio fields
(`robot_rl.types.PROPRIO_FIELDS`, picked from the stored state by name), never an object pose.

A person's success key lags what they see, so the frames just before a success label turns on may show the success
labelled as none; those within `key_lag_s` of the key are left out (neither kind), or the threshold, kept above every
validation negative, would sit above the successes themselves. The simulated person's key came 8 frames (0.8 s at
10 Hz) after the cube passed the 5 cm that counts as lifted. An oracle's labels (the scripted device, the simulated
operator without a person's limits) do not lag: there the frames before the key are the nearest misses, the most
telling negatives, and are kept.

Episodes, not frames, are split into train / validation / test: frames of one episode are near-copies of each
other, so a frame split would measure memory, not generalisation. The threshold is picked on the validation
episodes (`pick_threshold`: false-positive rate at most `--max-fpr` there, the most recall that allows, in the middle
of the range of such thresholds), and precision, recall and false-positive rate are reported on the test episodes,
which neither training nor the threshold saw.
"""

from __future__ import annotations

import copy
import dataclasses
import io
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import torch

from robot_rl.algos.reward_classifier import (
    ClassifierData,
    ClassifierReward,
    RewardClassifier,
    classifier_meta,
    classifier_metrics,
    load_classifier,
    pick_threshold,
    rates_at,
    record_classifier_data,
    save_classifier,
    success_probs,
    train_reward_classifier,
)
from robot_rl.config import TrainConfig
from robot_rl.demos.dataset import split_episodes
from robot_rl.demos.store import EpisodeStore
from robot_rl.errors import UserError
from robot_rl.types import PROPRIO_FIELDS, ObsLayout

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter


def proprio_columns(stored: dict[str, list[int]]) -> tuple[np.ndarray, dict[str, list[int]]]:
    """(indices into a stored `state`, the layout they make) for the proprio fields, in `proprio_layout` order."""
    idx, layout, start = [], {}, 0
    for name in PROPRIO_FIELDS:
        if name in stored:
            a, b = stored[name]
            idx.append(np.arange(a, b))
            layout[name] = [start, start + b - a]
            start += b - a
    if not idx:
        raise UserError(f"the store's state has no proprio field ({', '.join(PROPRIO_FIELDS)}): record it with "
                        "`collect --robot NAME`")  # fmt: skip
    return np.concatenate(idx), layout


PERSON_KEY_LAG_S = 1.0  # a person's key after the scene changed: a choice reaction and a look (PersonConfig: 0.75 s)


def key_lag(meta: dict[str, Any], key_lag_s: float | None) -> float:
    """Seconds before a success label's onset to leave out of an episode: `key_lag_s`, or by who labelled it (None):
    a person `PERSON_KEY_LAG_S`, an oracle 0."""
    if key_lag_s is not None:
        return key_lag_s
    oracle = meta.get("device") == "scripted" or (meta.get("device") == "simulated" and meta.get("operator", "oracle")
                                                  == "oracle")  # fmt: skip
    return 0.0 if oracle else PERSON_KEY_LAG_S


def load_frames(
    store_path: Path, cameras: list[str] | None, key_lag_s: float | None
) -> tuple[list[ClassifierData], dict[str, Any]]:
    """One `ClassifierData` per episode of the `cameras` (None: all the store recorded), less the frames within its
    key lag (`key_lag`) before each success label's onset, and the observation layout they share (state fields,
    cameras, size)."""
    episodes, layout = [], None
    with EpisodeStore(store_path, "r") as st:
        if not len(st):
            raise UserError(f"{store_path}: the store holds no episodes")
        for i in range(len(st)):
            meta = st.meta(i)
            if "label" not in st.keys:
                raise UserError(f"{store_path} has no labelled frames: record them with `robot-rl collect "
                                "--robot NAME --label-frames N` (the success key labels frames)")  # fmt: skip
            cams = list(cameras if cameras is not None else meta.get("cameras", []))
            idx, state_layout = proprio_columns(meta.get("state_layout") or {})
            ep = st.episode(i)
            if missing := [c for c in cams if c not in ep]:
                raise UserError(f"{store_path} episode {i} has no camera {missing} (it has {meta.get('cameras')})")
            this = {"state_layout": state_layout, "cameras": cams,
                    "image_size": int(ep[cams[0]].shape[1]) if cams else 0,
                    "crops": {c.get("name"): c.get("crop", []) for c in (meta.get("robot") or {}).get("cameras", [])
                              if c.get("name") in cams}}  # fmt: skip
            if layout is not None and this != layout:
                raise UserError(f"{store_path} episode {i} observes {this}, episode 0 {layout}: one layout per store")
            layout = this
            lag_s = key_lag(meta, key_lag_s)
            keep = sure_frames(ep["label"], round(lag_s * (meta.get("robot") or {}).get("control_hz", 0.0)))
            obs = {"state": ep["state"][keep][:, idx].astype(np.float32), **{c: ep[c][keep] for c in cams}}
            episodes.append(ClassifierData(obs, ep["label"][keep].astype(np.float32)))
    return episodes, layout


def sure_frames(labels: np.ndarray, lag: int) -> np.ndarray:
    """Indices of the frames not within `lag` frames before a success label's onset."""
    on = labels > 0.5
    onsets = np.flatnonzero(on & ~np.concatenate([[False], on[:-1]]))
    unsure = np.zeros(len(labels), bool)
    for i in onsets:
        unsure[max(0, i - lag) : i] = True
    return np.flatnonzero(~unsure)


def join(parts: list[ClassifierData]) -> ClassifierData:
    return ClassifierData({k: np.concatenate([p.obs[k] for p in parts]) for k in parts[0].obs},
                          np.concatenate([p.labels for p in parts]))  # fmt: skip


def train_classifier(
    store: Path,
    out: Path,
    *,
    cameras: list[str] | None = None,
    steps: int = 1500,
    max_fpr: float = 0.01,
    val_frac: float = 0.2,
    test_frac: float = 0.2,
    key_lag_s: float | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Trains on the train episodes, picks the threshold on the validation ones, reports the test ones; saves the
    classifier (threshold and layout inside) to `out` and returns the report."""
    torch.manual_seed(seed)
    episodes, layout = load_frames(store, cameras, key_lag_s)
    if len(episodes) < 3:
        raise UserError(f"{len(episodes)} labelled episode(s): need at least 3 (train, validation and test episodes)")
    tr, va, te = split_episodes(len(episodes), val_frac, seed, test_fraction=test_frac)
    train, val, test = (join([episodes[i] for i in ids]) for ids in (tr, va, te))
    state_dim = max(b for _, b in layout["state_layout"].values())
    clf = RewardClassifier(state_dim, layout["cameras"], layout["image_size"] or 64)
    clf.encoder.set_state_normalization(torch.from_numpy(train.obs["state"]), layout["state_layout"])
    try:
        train_reward_classifier(clf, train, steps, seed=seed)
    except ValueError as e:
        raise UserError(f"{store}: training episodes {tr}: {e} (label successes, and frames that are not)") from None
    val_probs = success_probs(clf, val.obs)
    threshold = pick_threshold(val_probs, val.labels, max_fpr)
    clf.threshold.fill_(threshold)
    test_probs = success_probs(clf, test.obs)
    report = {
        "threshold": threshold,
        "threshold_rule": f"false-positive rate <= {max_fpr} on the validation episodes, most recall, mid-gap",
        "test": rates_at(test_probs, test.labels, threshold),  # what to quote: episodes nothing was fitted on
        "test_at_0.5": rates_at(test_probs, test.labels, 0.5),
        "validation": rates_at(val_probs, val.labels, threshold),
        "train": rates_at(success_probs(clf, train.obs), train.labels, threshold),
        "episodes": {"train": sorted(tr), "validation": sorted(va), "test": sorted(te)},
        "store": str(store),
        "key_lag_s": key_lag_s,
        "steps": steps,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    save_classifier(clf, out, {**layout, "report": report})
    return report


def eval_classifier(path: Path, store: Path, threshold: float | None = None) -> dict[str, Any]:
    """Rates of a saved classifier on every labelled frame of `store` (e.g. episodes recorded after training)."""
    clf, meta = load_classifier(path)
    episodes, layout = load_frames(store, meta["cameras"], lag_of(meta))
    if layout["state_layout"] != meta["state_layout"]:
        raise UserError(f"{store} records state {layout['state_layout']}, the classifier reads {meta['state_layout']}")
    data = join(episodes)
    thr = float(clf.threshold) if threshold is None else threshold
    return {"threshold": thr, "episodes": len(episodes), **rates_at(success_probs(clf, data.obs), data.labels, thr)}


def lag_of(meta: dict[str, Any]) -> float | None:
    """The key lag a saved classifier's frames were read with (`key_lag`'s argument; 0 for one trained before it
    was kept)."""
    return (meta.get("report") or {}).get("key_lag_s", 0.0)


def run_classifier(cfg: TrainConfig, run_dir: Path, layout: ObsLayout) -> RewardClassifier:
    """A run's success classifier (`reward.source=classifier`), reading what the run's env observes (`layout`).
    `reward.classifier_path` is loaded (on a robot it must read exactly that layout: `robot-rl classifier train`);
    in sim without one it is trained on scripted frames (success held after it happens). A copy goes into the run
    dir with its layout, which actor nodes and resumes load."""
    saved = run_dir / "reward_classifier.safetensors"
    path = str(saved) if cfg.resume and saved.exists() else cfg.reward.classifier_path
    meta = {"state_layout": {k: list(v) for k, v in layout.state.items()}, "cameras": list(layout.cameras),
            "image_size": layout.image_size}  # fmt: skip
    if path:
        try:
            clf, stored = load_classifier(path)
        except (OSError, ValueError) as e:
            raise UserError(f"reward.classifier_path={path}: {e}") from None
        reads = {k: stored[k] if k != "image_size" or stored["cameras"] else 0 for k in meta}
        if cfg.robot is not None and reads != meta:
            raise UserError(
                f"reward.classifier_path={path} reads state {stored['state_layout']}, cameras "
                f"{stored['cameras']} at {stored['image_size']} px; this run observes "
                f"{meta['state_layout']}, cameras {meta['cameras']} at {meta['image_size']} px"
            )
        meta = stored
    else:
        clf, metrics = _train_on_scripted_frames(cfg, layout)
        meta = {**meta, "report": {"validation_frames": metrics}}
    if cfg.reward.threshold is not None:
        clf.threshold.fill_(cfg.reward.threshold)
    save_classifier(clf, saved, meta)
    return clf.eval()


def _train_on_scripted_frames(cfg: TrainConfig, layout: ObsLayout) -> tuple[RewardClassifier, dict[str, float]]:
    from robot_rl.envs import make_env
    from robot_rl.sim.experts import ScriptedExpert

    clf = RewardClassifier(layout.state_dim, layout.cameras, layout.image_size)
    holding = make_env(dataclasses.replace(cfg.env, terminate_on_success=False), seed=cfg.seed + 7)
    expert = ScriptedExpert(noise_std=cfg.demos.expert_noise, seed=cfg.seed + 7)
    data = record_classifier_data(holding, expert.act, episodes=max(cfg.demos.n_episodes, 10), seed=50_000)
    train_set, val_set = data.split(0.2, cfg.seed)
    train_reward_classifier(clf, train_set, cfg.reward.classifier_steps, seed=cfg.seed)
    clf.threshold.fill_(0.5)
    metrics = classifier_metrics(clf, val_set)
    print(f"reward classifier on held-out frames: {metrics}")
    return clf, metrics


Verdict = tuple[dict[str, np.ndarray], bool, bool]  # (frame, the person said success, the classifier paid)


def pack_verdicts(verdicts: list[Verdict]) -> bytes:
    """Verdicts as one npz, each frame key stacked, no pickles: the run dir's copy a resume loads, and what an actor
    node sends the learner with its episode summary."""
    frames, said, paid = zip(*verdicts, strict=True)
    buf = io.BytesIO()
    np.savez(buf, label=np.array(said, bool), paid=np.array(paid, bool),
             **{f"obs.{k}": np.stack([f[k] for f in frames]) for k in frames[0]})  # fmt: skip
    return buf.getvalue()


def unpack_verdicts(blob: bytes) -> list[Verdict]:
    with np.load(io.BytesIO(blob), allow_pickle=False) as f:
        obs = {k[4:]: f[k] for k in f.files if k.startswith("obs.")}
        said = f["label"] > 0.5
        paid = f["paid"] if "paid" in f.files else np.ones(len(said), bool)  # run dirs kept before misses were
        return [({k: v[i] for k, v in obs.items()}, bool(y), bool(p)) for i, (y, p) in enumerate(zip(said, paid,
                strict=True))]  # fmt: skip


class Refits:
    """HIL-SERL's answer to a classifier a policy has learnt to fool: the person's verdicts on the frames the
    classifier paid for (`Actor.judged`), and their success key on frames it did not (successes it missed, which a
    classifier paying none of a cell's successes learns from nothing else), become labelled frames, and every
    `reward.refit_every` new ones the classifier is fine-tuned for `reward.refit_steps` on them and the frames it was
    trained on (the store its `classifier train` report names), the verdicts drawn as often as those within each
    class, so a few dozen false positives weigh as much as the store's negatives. The refitted copy replaces the
    classifier in the reward wrappers that `serve` named, an attribute swap, safe against an actor stepping in its own
    thread (real time); the threshold stays. Verdicts and refitted weights are saved in the run dir, which a resume
    loads. A frame the person refused was never paid (`Actor.judged`); other transitions keep the reward they got
    until replay drops them."""

    def __init__(self, cfg: TrainConfig, run_dir: Path, clf: RewardClassifier) -> None:
        self.clf, self.every, self.steps, self.seed = clf, cfg.reward.refit_every, cfg.reward.refit_steps, cfg.seed
        self.path, self.frames_path = run_dir / "reward_classifier.safetensors", run_dir / "classifier_verdicts.npz"
        self.meta = classifier_meta(self.path)
        store = (self.meta.get("report") or {}).get("store")
        if not store or not Path(store).exists():
            where = f"{store} is gone" if store else "its file names no store"
            raise UserError(f"reward.refit_every refits the classifier on the frames it was trained on: {where} "
                            "(train it with `robot-rl classifier train STORE`, keep the store there)")  # fmt: skip
        episodes, layout = load_frames(Path(store), self.meta["cameras"], lag_of(self.meta))
        if layout["state_layout"] != self.meta["state_layout"]:
            raise UserError(f"{store} records state {layout['state_layout']}, the classifier reads "
                            f"{self.meta['state_layout']}")  # fmt: skip
        self.store = join(episodes)
        self.judged: deque[Verdict] = deque()  # the actor's (`Actor.judged`)
        self.verdicts: list[Verdict] = []
        self.refits = self.meta.get("refits", 0)
        if cfg.resume and self.frames_path.exists():
            self.verdicts = unpack_verdicts(self.frames_path.read_bytes())
        self._at_refit = len(self.verdicts)
        self._updates_at_refit: int | None = None  # the learner's updates at the last refit (None: none yet)
        self._wrappers: list[ClassifierReward] = []

    def serve(self, wrapper: gym.Env) -> None:
        """Hand refitted classifiers to this reward wrapper (the actor's env; a robot's evaluation env without a
        success topic)."""
        if isinstance(wrapper, ClassifierReward):
            self._wrappers.append(wrapper)

    def _take(self) -> None:
        """What the actor has judged so far (it may append meanwhile, from its thread: popleft is thread-safe)."""
        while self.judged:
            obs, said, paid = self.judged.popleft()
            self.verdicts.append(({k: obs[k] for k in self.store.obs}, said, paid))

    def due(self, updates: int) -> bool:
        """`every` new verdicts, and the learner has made as many updates (`updates`: its count) since the last
        refit as a refit takes gradient steps, so that refits take about half its time at most. Without the second
        rule a real-time run whose verdicts came faster than a refit ran (~50 s on a loaded 2-core box) refitted at
        every env step while the arm went on acting: 300 env steps took 16 robot-minutes and no update."""
        rested = self._updates_at_refit is None or updates - self._updates_at_refit >= self.steps
        return rested and len(self.verdicts) + len(self.judged) - self._at_refit >= self.every

    def actor_weights(self) -> dict[str, torch.Tensor]:
        """The refitted classifier for actor nodes, `classifier.` keys beside the policy's (`nodes.actor_node.
        load_weights`), so a person's verdicts on any arm reach every arm; none before the first refit."""
        if not self.refits:
            return {}
        return {f"classifier.{k}": v.detach().clone() for k, v in self.clf.state_dict().items()}

    def counts(self) -> dict[str, int]:
        """For the evaluation log, so far: paid frames judged, those the person called no success (false positives),
        unpaid frames they called a success (missed successes), refits."""
        self._take()
        return {"classifier_paid_judged": sum(paid for *_, paid in self.verdicts),
                "classifier_false_positives": sum(not said for _, said, _ in self.verdicts),
                "classifier_missed_successes": sum(said and not paid for _, said, paid in self.verdicts),
                "classifier_refits": self.refits}  # fmt: skip

    def refit(self, updates: int = 0) -> dict[str, float | None]:
        """Fine-tunes a copy on the store's frames and the verdicts, swaps it in, saves it and the verdicts;
        returns the refitted classifier's rates on the verdicts (training frames: a check it took them in).
        `updates`: the learner's update count now (`due`)."""
        self._updates_at_refit = updates
        self._take()
        frames, said, _ = zip(*self.verdicts, strict=True)
        mine = ClassifierData({k: np.stack([o[k] for o in frames]) for k in self.store.obs}, np.array(said, np.float32))
        data = join([self.store, mine])
        weights = np.concatenate([np.ones(len(self.store.labels)), self._verdict_weights(mine.labels)])
        fresh = copy.deepcopy(self.clf)
        train_reward_classifier(fresh, data, self.steps, seed=self.seed + self.refits, weights=weights)
        self.clf = fresh.eval()
        for w in self._wrappers:
            w.clf = fresh
        self.refits += 1
        self._at_refit = len(self.verdicts)
        save_classifier(self.clf, self.path, {**self.meta, "refits": self.refits})
        self.frames_path.write_bytes(pack_verdicts(self.verdicts))
        return classifier_metrics(self.clf, mine)

    def refit_and_log(self, writer: SummaryWriter, say: Callable[[str], None], step: int, updates: int) -> None:
        """`refit` (`updates`: the learner's count), its counts to tensorboard at env step `step` and one line to
        `say`."""
        t = time.perf_counter()
        rates = self.refit(updates)
        counts = self.counts()
        for k, v in counts.items():
            writer.add_scalar(f"classifier/{k}", v, step)
        say(f"classifier refitted on {counts['classifier_paid_judged']} judged frames "
            f"({counts['classifier_false_positives']} false positives) in {time.perf_counter() - t:.0f} s: "
            f"now on them {rates}")  # fmt: skip

    def _verdict_weights(self, labels: np.ndarray) -> np.ndarray:
        """Per verdict, its weight such that a class's verdicts weigh as much as the store's frames of that class."""
        store = self.store.labels > 0.5
        w = np.ones(len(labels))
        for cls in (True, False):
            mine = (labels > 0.5) == cls
            if mine.any():
                w[mine] = (store == cls).sum() / mine.sum()
        return w
