"""Real-time robot learning in one process: the actor owns the clock.

A robot that is not lockstep moves on its own clock: a command late by more than its watchdog allows (the sim
robot's 0.25 s, a real driver's similar) holds the arm until the next reset. So on such a run the actor steps the
`RobotEnv` in its own thread at the control rate and hands each transition through a queue; the learner (the
caller's thread) takes them in, updates as often as it can up to the update-to-data limit, hands newer weights to
the actor and saves checkpoints: none of it sits between an observation and its command, and a slow learner only
means fewer updates per env step, never a slower arm. Evaluations need the one arm: at an evaluation's env step
the actor finishes its episode and parks, the evaluation runs its own episodes at the control rate, then the actor
goes on. No episode is cut short by the learner.

The actor loads new weights between steps, as the one-thread trainer does (`loop.sync_every`): loading a policy
takes a millisecond against a 100 ms period, and waiting for the episode's end would add up to an episode of
policy lag, which the sim-trained update-to-data settings never saw.

Lockstep robots and sim runs keep `trainer.train`'s one-thread loop: the world waits for them, and it is
bit-reproducible.
"""

from __future__ import annotations

import queue
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from robot_rl.loop.actor import Actor, EpisodeResult, EpisodeStats
from robot_rl.real.timing import frozen_heap
from robot_rl.types import Transition

if TYPE_CHECKING:
    from robot_rl.loop.trainer import TrainingRun

Item = tuple[Transition, EpisodeResult | None]  # a transition, and the episode it ended
_SWITCH_S = 0.0005  # the GIL switch interval while the actor runs in its thread (`learn_in_real_time`)


class ActorThread:
    """An `Actor` stepping in its own thread. The learner's thread reaches it only through `take`, `push`, `park`,
    `resume` and `close`; the env is the actor's except while it is parked."""

    def __init__(self, actor: Actor, human: object | None = None, progress: int = 0) -> None:
        """`progress`: env steps taken before this session (a resume): the simulated operator's sense of time."""
        self.actor, self.human, self._progress = actor, human, progress
        self.error: BaseException | None = None
        self._out: queue.SimpleQueue[Item] = queue.SimpleQueue()
        self._weights: tuple[dict[str, torch.Tensor], int] | None = None
        self._cond = threading.Condition()
        self._park = self._stop = False  # asked of the actor
        self._state = "acting"  # acting | parked (between episodes, until resumed) | ended
        self._thread = threading.Thread(target=self._run, name="actor", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        actor = self.actor
        try:
            while True:
                with self._cond:
                    if self._stop:
                        return
                    if self._park and actor.between_episodes:
                        self._state = "parked"
                        self._cond.notify_all()
                        self._cond.wait_for(lambda: not self._park or self._stop)
                        self._state = "acting"
                        continue
                    fresh, self._weights = self._weights, None
                if fresh is not None:
                    actor.load_weights(*fresh)
                if self.human is not None:
                    self.human.set_progress(self._progress + actor.stats.steps)
                t = actor.step()
                self._out.put((t, actor.last_episode if t.done else None))
        except BaseException as e:  # the learner's thread raises it (`take`)
            self.error = e
        finally:
            with self._cond:
                self._state = "ended"
                self._cond.notify_all()

    def take(self, timeout_s: float = 0.0) -> list[Item]:
        """What the actor made since the last call, waiting up to `timeout_s` for the first; raises what ended
        the actor once everything it made before is taken."""
        items: list[Item] = []
        try:
            items.append(self._out.get(timeout=timeout_s) if timeout_s > 0 else self._out.get_nowait())
            while True:
                items.append(self._out.get_nowait())
        except queue.Empty:
            pass
        if not items and self.error is not None:
            raise self.error
        return items

    def push(self, weights: dict[str, torch.Tensor], version: int) -> None:
        """Newer weights, loaded before the actor's next step (a newer push replaces one not loaded yet)."""
        with self._cond:
            self._weights = (weights, version)

    def park(self, work: Callable[[], bool] = lambda: False) -> None:
        """Returns once the actor is between episodes and stays there (its episode ends first, at the control
        rate). `work()` runs meanwhile (the learner's owed updates) as long as it returns True."""
        with self._cond:
            self._park = True
        while True:
            with self._cond:
                if self._state == "ended" and self.error is not None:
                    raise self.error
                if self._state != "acting":
                    return
            if not work():
                with self._cond:
                    self._cond.wait_for(lambda: self._state != "acting", timeout=0.05)

    def resume(self) -> None:
        with self._cond:
            self._park = False
            self._cond.notify_all()

    def close(self, timeout_s: float = 10.0) -> None:
        """Stops the actor after the step under way (a parked one at once) and waits for it."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._thread.join(timeout_s)


def learn_in_real_time(run: TrainingRun, actor: Actor, stats: EpisodeStats, human: object | None = None) -> None:
    """The run until `run.done` (module docstring). `stats` counts the episodes the learner took in (the summary's
    and the checkpoints'); the actor's own run ahead by what is still queued. On return the actor has stopped
    between episodes, so the final evaluation finds the arm free; on an exception (Ctrl-C) it stops after its step.
    """
    learner, loop = run.learner, run.cfg.loop
    # Each time the actor releases the GIL (a torch op, a ROS call, its sleep) a busy learner holds it until the
    # switch interval ends: at CPython's default interval the dozens of such waits in a step add up, under a learner
    # stall of pure Python, to a step longer than the robot's watchdog allows, and the arm holds. A short interval
    # keeps a step within its period. A full garbage collection walking the start-up's heap (torch, MuJoCo, the
    # config) holds the GIL for about a watchdog period too: the heap is frozen, as in deploy.
    with frozen_heap():
        switch = sys.getswitchinterval()
        sys.setswitchinterval(_SWITCH_S)
        arm = ActorThread(actor, human, learner.env_steps)
        pushed = (learner.env_steps, learner.updates)  # the env step and the version of the last weights pushed

        def update() -> bool:
            if learner.updates_due <= 0:
                return False
            learner.update()
            return True

        try:
            while not run.done:
                # Transitions first, one update between takes: checkpoints and evaluations wait one update at most.
                for t, episode in arm.take(timeout_s=0.0 if learner.updates_due > 0 else 0.05):
                    learner.add(t)
                    stats.steps += 1
                    stats.intervened_steps += int(t.intervened)
                    stats.aborted = actor.stats.aborted
                    if episode is not None:
                        stats.record(episode.success, episode.length, episode.interventions)
                    evaluating = loop.eval_every and learner.env_steps % loop.eval_every == 0
                    if evaluating:  # the arm is the evaluation's from the end of the actor's episode
                        arm.park(update)
                    run.after_step(stats)
                    if run.done:
                        break  # the rest was acted past the budget: not trained on
                    if evaluating:
                        arm.resume()
                if not run.done:
                    update()
                    if learner.updates > pushed[1] and learner.env_steps - pushed[0] >= loop.sync_every:
                        arm.push(learner.policy_weights(), learner.updates)
                        pushed = (learner.env_steps, learner.updates)
            arm.park()  # the episode under way ends at the control rate: the final evaluation resets an idle arm
        finally:
            arm.close()
            sys.setswitchinterval(switch)
            stats.aborted = actor.stats.aborted  # including any after the last transition taken
