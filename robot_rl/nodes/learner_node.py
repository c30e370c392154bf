"""Learner node: transitions from any number of actors in, weights out, at the configured UTD rate.

The same `TrainingRun` as the single-process trainer does the learning, evaluation and checkpoints; this file
only turns messages into `Learner.add` calls and weights into messages.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from robot_rl.config import TrainConfig
from robot_rl.loop.actor import EpisodeStats
from robot_rl.loop.ranks import Ranks, follow, learn_in_ranks, pin_device, rank_config, spawn_ranks, stop
from robot_rl.loop.run import actor_counts, take_episodes
from robot_rl.loop.trainer import TrainingRun
from robot_rl.nodes.links import LearnerLink, learner_link, with_run_id


def run_learner(cfg: TrainConfig, overrides: list[str] = ()) -> Path:
    """With `cfg.robot` the arm is the one actor's: this node never connects to it (no evaluations; `robot-rl deploy`
    evaluates a checkpoint) and may run on any machine of the ROS graph, e.g. the GPU box. Ctrl-C (or launch's, or
    a bench's SIGINT) saves a checkpoint and an "interrupted" summary with each actor's count, as `train` does.
    With `distributed.learners` > 1 this is rank 0 and starts the others (`overrides`: their command line), unless
    torchrun started them all (loop/ranks.py)."""
    cfg = with_run_id(cfg)
    world = cfg.distributed.learners
    rank = pin_device(world)
    run = TrainingRun(cfg if rank == 0 else rank_config(cfg, rank))
    children = spawn_ranks(world, list(overrides)) if rank == 0 else []
    ranks = Ranks(world, run.device)
    try:
        if world > 1:
            ranks.start_alike(run.algo, run.learner, cfg.seed)
        with learner_link(cfg, rank) as link:
            return _lead(run, link, ranks) if rank == 0 else follow(run, link, ranks)
    finally:
        ranks.close()
        stop(children)


def _lead(run: TrainingRun, link: LearnerLink, ranks: Ranks) -> Path:
    stats = EpisodeStats(episodes=run.state.episodes)
    publish = Publishing(link.weights, run, run.cfg.distributed.publish_every)
    try:
        if ranks.world > 1:
            actors = learn_in_ranks(run, link, stats, ranks, publish)
        else:
            _learn(run, link, stats, publish)
            actors = actor_counts(link.transitions.actors, run.learner.updates)
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not tear the checkpoint
        return run.finish(stats, interrupted=True, actors=actor_counts(link.transitions.actors, run.learner.updates))
    publish(final=True)
    link.transitions.finish()  # actors stop now, before the final evaluation, rather than wait for a restart
    # The actors' own episodes: on a robot run (no evaluations here) the only success rate there is.
    return run.finish(stats, actors=actors, train_episodes=stats.episodes, train_success_rate=stats.success_rate)


class Publishing:
    """Weights out (the policy's, and a refitted classifier's: `Refits.actor_weights`) every `every` updates, sooner
    when the learner is out of data (`idle`), and at the end."""

    def __init__(self, weights: Any, run: TrainingRun, every: int) -> None:
        self.weights, self.run, self.every = weights, run, every
        self.published = -1
        self(final=True)

    def __call__(self, idle: bool = False, final: bool = False) -> None:
        updates = self.run.learner.updates
        if final or updates - self.published >= self.every or (idle and updates > self.published):
            refitted = self.run.refits.actor_weights() if self.run.refits is not None else {}
            self.weights.publish(self.run.learner.policy_weights() | refitted, updates)
            self.published = updates


def _learn(run: TrainingRun, link: LearnerLink, stats: EpisodeStats, publish: Publishing) -> None:
    """Until the run is done: each actor's transitions into the learner at its UTD, weights out between. With
    real-time robots the transitions waiting are taken in at least every `ingest_every_s`, trained on or not."""
    cfg, learner, transitions = run.cfg, run.learner, link.transitions
    slice_s = cfg.distributed.ingest_every_s if cfg.robot is not None and not cfg.robot.lockstep else None
    while not run.done:
        received = transitions.poll_batches(timeout_s=0.0 if learner.updates_due else 0.01)
        if not received and not learner.updates_due:
            # Out of data: actors wait for a fresher policy (they step at most `steps_per_version` per
            # version), e.g. after one of them died, so hand it out now instead of every `publish_every`.
            publish(idle=True)
        for actor_id, batch in received:
            for t in batch:
                if run.done:
                    break  # the rest of a batch past the budget is not trained on
                learner.add(t, stream=actor_id)
                stats.steps += 1
                stats.intervened_steps += int(t.intervened)
                if slice_s is None:
                    learner.train_to_rate_limit()
                    publish()
                run.after_step(stats)
        if slice_s is not None and not run.done:
            learner.train_for(slice_s)
            publish()
        take_episodes(run.state, link.episodes(), stats, run.refits)
