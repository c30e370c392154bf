"""Learner node: transitions from any number of actors in, weights out, at the configured UTD rate.

The same `TrainingRun` as the single-process trainer does the learning, evaluation and checkpoints; this file
only turns messages into `Learner.add` calls and weights into messages.
"""

from __future__ import annotations

import signal
from pathlib import Path

from robot_rl.config import TrainConfig
from robot_rl.loop.actor import EpisodeStats
from robot_rl.loop.trainer import TrainingRun
from robot_rl.nodes.links import LearnerLink, learner_link, with_run_id


def run_learner(cfg: TrainConfig) -> Path:
    """With `cfg.robot` the arm is the one actor's: this node never connects to it (no evaluations; `robot-rl deploy`
    evaluates a checkpoint) and may run on any machine of the ROS graph, e.g. the GPU box. Ctrl-C (or launch's, or
    a bench's SIGINT) saves a checkpoint and an "interrupted" summary with each actor's count, as `train` does."""
    cfg = with_run_id(cfg)
    run = TrainingRun(cfg)
    stats = EpisodeStats(episodes=run.state.episodes)
    with learner_link(cfg) as link:
        try:
            _learn(run, link, stats)
        except KeyboardInterrupt:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not tear the checkpoint
            return run.finish(stats, interrupted=True, actors=_actors(link, run.learner.updates))
        link.weights.publish(run.learner.policy_weights(), run.learner.updates)
        link.transitions.finish()  # actors stop now, before the final evaluation, rather than wait for a restart
        # The actors' own episodes: on a robot run (no evaluations here) the only success rate there is.
        return run.finish(stats, actors=_actors(link, run.learner.updates), train_episodes=stats.episodes,
                          train_success_rate=stats.success_rate)  # fmt: skip


def _learn(run: TrainingRun, link: LearnerLink, stats: EpisodeStats) -> None:
    """Until the run is done: each actor's transitions into the learner at its UTD, weights out between. With
    real-time robots the transitions waiting are taken in at least every `ingest_every_s`, trained on or not."""
    cfg, learner, transitions, weights = run.cfg, run.learner, link.transitions, link.weights
    slice_s = cfg.distributed.ingest_every_s if cfg.robot is not None and not cfg.robot.lockstep else None
    weights.publish(learner.policy_weights(), learner.updates)
    published = learner.updates

    def publish(idle: bool = False) -> None:
        nonlocal published
        if learner.updates - published >= cfg.distributed.publish_every or (idle and learner.updates > published):
            weights.publish(learner.policy_weights(), learner.updates)
            published = learner.updates

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
        for e in link.episodes():
            stats.record(bool(e["success"]), int(e["length"]), int(e["interventions"]))


def _actors(link: LearnerLink, updates: int) -> dict[str, dict]:
    """Per actor: transitions taken, lost, and its policy lag in updates."""
    return {
        a: {"transitions": s.received, "lost": s.lost, "policy_lag": updates - s.policy_version}
        for a, s in link.transitions.actors.items()
    }
