"""Actor node: an env (sim, or a robot behind the same interface) stepped by the latest policy weights.

Transitions stream out as they happen; weights are applied between steps. The actor never runs more than
`steps_per_version` steps on one policy version while a learner is alive, which bounds policy lag even
when actors are much faster than the learner.

A robot that does not wait for us (not lockstep) is never left mid-episode: a command late by more than its
driver's watchdog holds the arm and loses the episode. Its actor finishes each episode on the weights it has,
sends mid-episode only what the learner's window has room for, and waits for weights or the learner only
between episodes; a learner behind costs policy lag, not arm time.
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from contextlib import closing
from typing import Any

import torch

from robot_rl.algos import reward_classifier
from robot_rl.algos.reward_classifier import RewardClassifier
from robot_rl.algos.sac import make_policy
from robot_rl.config import TrainConfig
from robot_rl.errors import UserError
from robot_rl.loop.actor import Actor
from robot_rl.loop.adapters import make_train_env
from robot_rl.loop.classifier import pack_verdicts
from robot_rl.loop.human import make_human
from robot_rl.nodes.links import actor_link
from robot_rl.real.timing import frozen_heap, one_inference_thread
from robot_rl.transport import BackpressureTimeout
from robot_rl.types import ObsLayout

log = logging.getLogger("robot_rl.actor")


def actor_classifier(cfg: TrainConfig) -> RewardClassifier | None:
    """The run's classifier, built from the layout saved with it (no env needed: on a robot that is the arm)."""
    if cfg.reward.source != "classifier":
        return None
    if not cfg.reward.classifier_path:
        raise UserError("reward.source=classifier: actor nodes need reward.classifier_path (the learner's run dir "
                        "has one)")  # fmt: skip
    return reward_classifier.load_classifier(cfg.reward.classifier_path)[0]


def load_weights(actor: Actor, clf: RewardClassifier | None, weights: dict[str, torch.Tensor], version: int) -> None:
    """The learner's policy, and the classifier it refitted on a person's verdicts where it sends one
    (`Refits.actor_weights`): loaded in place, so the env's reward wrapper pays by it from the next step."""
    refitted = {k.removeprefix("classifier."): v for k, v in weights.items() if k.startswith("classifier.")}
    if refitted and clf is not None:
        clf.load_state_dict(refitted)
    actor.load_weights({k: v for k, v in weights.items() if not k.startswith("classifier.")}, version)


def drain(judged: deque) -> list:
    return [judged.popleft() for _ in range(len(judged))]


def flush(sender: Any, actor_id: str) -> None:
    try:
        sender.flush()
    except BackpressureTimeout as e:
        # Only a dead, stuck or finished learner stops taking transitions; a replacement resumes from a
        # checkpoint, so these uncommitted ones are not needed.
        dropped = sender.discard_pending()
        if sender.learner_finished:
            log.info("%s: the learner finished the run (%d transitions past its budget unsent)", actor_id, dropped)
        else:
            log.warning("%s: %s; dropped %d transitions", actor_id, e, dropped)


def run_actor(cfg: TrainConfig, index: int, max_episodes: int = 0) -> int:
    """Acts until killed (or `max_episodes`); returns the number of env steps taken."""
    dist = cfg.distributed
    seed = cfg.seed + 1000 * (index + 1)  # actors explore different episodes
    actor_id = f"actor{index}-{os.getpid()}"  # a restarted actor is a new sequence, not a gap in the old one
    clf = actor_classifier(cfg)
    env = make_train_env(cfg, seed, clf)
    clock = getattr(env.unwrapped, "clock", None)  # a robot's arm time by activity (`real.timing.ArmClock`)
    lay = ObsLayout.of_env(env)
    policy = make_policy(cfg.sac, lay.state_dim, lay.action_dim, lay.cameras, lay.image_size)
    human = make_human(cfg, seed)
    actor = Actor(env, policy, human, seed)
    if cfg.reward.refit_every:  # the person judges what the classifier pays; the learner refits on the verdicts
        actor.judged = deque()
    steps = 0
    # frozen_heap: a full collection of the start-up's heap holds the GIL for a control period or more (deploy's);
    # one torch thread: batch-1 inference beside a learner on the same cores (real/timing.py).
    # closing(env): a robot's rclpy node left spinning aborts the process at exit.
    with closing(env), actor_link(cfg, index, actor_id) as link, frozen_heap(), one_inference_thread():
        sender, weights = link.sender, link.weights
        fresh = None
        # Acting on random weights, or before the learner's bulk endpoint took our connection, would be thrown away.
        while not sender.learner_finished:
            fresh = weights.poll(timeout_s=dist.learner_timeout_s) or fresh
            if fresh is not None and sender.connected():  # on Zenoh a presence query: asked once a round
                break
            log.warning("%s: waiting for a learner (weights: %s)", actor_id, fresh is not None)
        if fresh is not None:
            load_weights(actor, clf, *fresh)
            sender.policy_version = fresh[1]
        since_update = 0
        realtime = cfg.robot is not None and not cfg.robot.lockstep
        period = 1.0 / dist.control_hz if dist.control_hz > 0 else 0.0
        next_tick = time.perf_counter()
        while (max_episodes <= 0 or actor.stats.episodes < max_episodes) and not sender.learner_finished:
            waiting = since_update >= dist.steps_per_version and (not realtime or actor.between_episodes)
            if waiting:
                flush(sender, actor_id)  # the learner needs these steps before it has a newer policy to give
            # A robot in real time takes weights between episodes only: on Zenoh a fetch is a query to the learner,
            # which can outlast the driver's command watchdog mid-episode.
            news = not realtime or actor.between_episodes
            fresh = weights.poll(timeout_s=dist.learner_timeout_s if waiting else 0.0) if news else None
            if fresh is not None:
                load_weights(actor, clf, *fresh)
                sender.policy_version, since_update = fresh[1], 0
            elif news and weights.reannounced:  # a learner resumed from our weights' checkpoint: it waits for us
                since_update = 0
            elif waiting:
                if dist.on_learner_loss == "hold" or cfg.robot is not None:
                    # On a robot nothing is commanded while the learner is gone: the arm holds (the robot's command
                    # watchdog; RobotEnv's own watchdog aborts the episode when stepping resumes).
                    log.warning("%s: learner silent for %.1f s; holding", actor_id, dist.learner_timeout_s)
                    continue
                since_update = 0  # "continue": act on the last weights until the learner returns
            if human is not None:
                human.set_progress(actor.policy_version)  # version = learner updates = env steps consumed
            t = actor.step()
            sender.add_nowait(t)
            if t.done or (sender.batch_full and not (realtime and sender.full())):
                flush(sender, actor_id)
            steps += 1
            since_update += 1
            if t.done:
                e = actor.last_episode
                link.episode({
                    "actor_id": actor_id, "episode": actor.stats.episodes, "length": int(e.length),
                    "episode_return": float(e.episode_return), "success": bool(e.success),
                    "interventions": int(e.interventions), "policy_version": int(actor.policy_version),
                    **({"arm_s": dict(clock.seconds)} if clock is not None else {}),
                    **({"verdicts": pack_verdicts(drain(actor.judged))} if actor.judged else {}),
                })  # fmt: skip
            if period:
                next_tick += period
                time.sleep(max(0.0, next_tick - time.perf_counter()))
        flush(sender, actor_id)
    return steps
