"""The actor: env + policy + (simulated) human -> transitions. Knows nothing of how they are transported.

`Actor` steps one env; `VecActor` steps a batch of them (`make_vec_env`) on one policy call per step.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import gymnasium as gym
import numpy as np
import torch

from robot_rl.types import EpisodeAborted, NpObs, Transition

if TYPE_CHECKING:
    from robot_rl.sim.maniskill import ManiSkillVecEnv

log = logging.getLogger("robot_rl.actor")

# (env, policy action) -> (executed action, whether the human acted). The sim's SimulatedHuman and a
# teleop device (`loop.human.DeviceIntervener`, which may also hold the person's `verdict`) both fit.
Intervener = Callable[[gym.Env, np.ndarray], tuple[np.ndarray, bool]]


@dataclass
class EpisodeResult:
    success: bool
    length: int
    episode_return: float
    interventions: int


@dataclass
class EpisodeStats:
    episodes: int = 0
    successes: int = 0
    steps: int = 0
    intervened_steps: int = 0
    aborted: int = 0  # episodes the env aborted (e-stop, driver fault, robot silent); not in the rates below
    recent_success: list[bool] = field(default_factory=list)
    recent_intervention: list[float] = field(default_factory=list)

    def record(self, success: bool, length: int, intervened: int, window: int = 20) -> None:
        self.episodes += 1
        self.successes += int(success)
        self.recent_success = (self.recent_success + [success])[-window:]
        self.recent_intervention = (self.recent_intervention + [intervened / max(length, 1)])[-window:]

    @property
    def success_rate(self) -> float:
        return float(np.mean(self.recent_success)) if self.recent_success else 0.0

    @property
    def intervention_rate(self) -> float:
        """Fraction of recent episodes' steps where the human acted."""
        return float(np.mean(self.recent_intervention)) if self.recent_intervention else 0.0


class Actor:
    def __init__(
        self,
        env: gym.Env,
        policy: torch.nn.Module,
        intervener: Intervener | None = None,
        seed: int = 0,
        retry_s: float = 1.0,
    ) -> None:
        """`retry_s`: pause between reset attempts while the env refuses to start an episode (e-stop pressed).
        `judged`: set to a deque to collect (frame, the person's verdict, paid) for each frame a success classifier
        paid for, where the intervener can `judge` (a person at a device): `loop.classifier.Refits` learns from
        them, and a frame the person calls no success is not paid (the episode ends as on their failure key). A
        success key the person presses on a frame the classifier did not pay is a verdict too: a success it missed."""
        self.env = env
        self.policy = policy
        self.intervener = intervener
        self.seed = seed
        self.retry_s = retry_s
        self.stats = EpisodeStats()
        self.policy_version = 0
        self.last_episode: EpisodeResult | None = None
        self._obs: NpObs | None = None
        self._ep_len = 0
        self._ep_interventions = 0
        self._ep_return = 0.0
        self.judged: deque[tuple[NpObs, bool, bool]] | None = None
        # This episode's newest transitions the env may still void (`info["unconfirmed_steps"]`: steps a robot's
        # not-following check has not cleared yet), and those cleared but not handed out.
        self._held: list[Transition] = []
        self._ready: deque[Transition] = deque()

    def load_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        self.policy.load_state_dict(state_dict)
        self.policy_version = version

    def _reset(self) -> NpObs:
        obs, _ = self.env.reset(seed=self.seed + self.stats.episodes)
        if hasattr(self.intervener, "reset"):
            self.intervener.reset()
        self.policy.reset()
        self._ep_len = self._ep_interventions = 0
        self._ep_return = 0.0
        return obs

    @property
    def between_episodes(self) -> bool:
        """No episode under way: the next step resets, so the arm may be lent (an evaluation) or left."""
        return self._obs is None and not self._ready

    def abandon_episode(self) -> None:
        """The env was reset under us (an evaluation on the same robot): the next step starts a new episode."""
        self._obs = None
        self._void()

    def step(self) -> Transition:
        """One env step; resets on the way in when the previous episode ended.

        A stop the policy caused (a joint limit, the workspace, a force limit) is the env's terminal step, worth
        its safety reward and stored like any other, so the critic learns what it costs. An episode the env
        aborts (`EpisodeAborted`: an e-stop, a driver's fault, silence) ends where it stands without poisoning the
        buffers: its transitions so far were stored as they were, none terminal (the
        critic bootstraps through them as through a time limit), the failed step yields no transition, and the
        next episode's first obs differs from the last next obs, which starts a new sequence in the replay buffer.
        Resets are retried every `retry_s` until the env starts one (the e-stop released, the robot back).

        Steps the env has not confirmed yet (`info["unconfirmed_steps"]`: the arm may have stopped following them)
        are held back, so a step may run several env steps and later ones none; an abort voids the newest
        `void_steps` of them, so nothing is stored from an arm that stopped following. An episode's end releases
        everything."""
        while not self._ready:
            try:
                self._step()
            except EpisodeAborted as e:
                if self._obs is not None:
                    self.stats.aborted += 1
                    log.warning("episode aborted after %d steps (%d voided): %s", self._ep_len,
                                min(e.void_steps, len(self._held)), e)  # fmt: skip
                else:
                    log.warning("cannot start an episode (retrying in %.1f s): %s", self.retry_s, e)
                    time.sleep(self.retry_s)
                self._obs = None
                self._void(e.void_steps)
        return self._ready.popleft()

    def _void(self, n: int | None = None) -> None:
        """Drop the newest `n` held transitions (None: all), counted as no steps as the step that aborted; release
        the rest."""
        n = len(self._held) if n is None else min(n, len(self._held))
        void = self._held[len(self._held) - n :]
        self.stats.steps -= len(void)
        self.stats.intervened_steps -= sum(t.intervened for t in void)
        self._ready.extend(self._held[: len(self._held) - n])
        self._held.clear()

    def _step(self) -> None:
        if self._obs is None:
            self._obs = self._reset()
        obs = self._obs
        action = self.policy.select_action(obs)
        intervened = False
        if self.intervener is not None:
            action, intervened = self.intervener(self.env, action)
            if intervened and hasattr(self.env, "take_over"):  # residual: executed as is, stored in agent terms
                action = self.env.take_over(action)
        next_obs, reward, terminated, truncated, info = self.env.step(action)
        # A person's success / failure key (a device intervener's `verdict`) overrides the reward at any time.
        verdict = getattr(self.intervener, "verdict", None)
        if info.get("classifier_success") and self.judged is not None and hasattr(self.intervener, "judge"):
            said = self.intervener.judge(self.env)
            self.judged.append((next_obs, said, True))
            # The person's no is their failure key: a payment they refused would teach the policy the very frames
            # the refits take away from the classifier, and stay in replay long after.
            verdict = verdict or (None if said else "failure")
        elif self.judged is not None and "success" in getattr(self.intervener, "pressed", ()):
            # What the person saw when they pressed it (the step's poll looks before the step). Without it a
            # classifier that pays none of a cell's successes is never refitted on one, and the run sees no reward.
            self.judged.append((obs, True, False))
        if verdict == "success":
            reward, terminated, truncated = 1.0, True, False
        elif verdict == "failure":
            reward, terminated, truncated = 0.0, False, True
        self._ep_len += 1
        self._ep_interventions += int(intervened)
        self._ep_return += float(reward)
        self.stats.steps += 1
        self.stats.intervened_steps += int(intervened)
        t = Transition(
            obs=obs,
            action=np.asarray(action, np.float32),
            reward=float(reward),
            next_obs=next_obs,
            terminated=bool(terminated),
            truncated=bool(truncated),
            intervened=intervened,
            # An agent step that ran a whole action chunk (DSRL) says how many env steps it took.
            extras={"chunk_length": np.float32(info["chunk_length"])} if "chunk_length" in info else {},
        )
        if t.done:  # a person's verdict is the episode's outcome (a robot with no success topic has no other)
            success = verdict == "success" if verdict is not None else bool(info["success"])
            self.last_episode = EpisodeResult(success, self._ep_len, self._ep_return, self._ep_interventions)
            self.stats.record(self.last_episode.success, self._ep_len, self._ep_interventions)
            self._obs = None
        else:
            self._obs = next_obs
        self._held.append(t)
        keep = 0 if t.done else min(int(info.get("unconfirmed_steps", 0)), len(self._held))
        self._ready.extend(self._held[: len(self._held) - keep])
        del self._held[: len(self._held) - keep]


class VecActor:
    """N envs of one batched env acting on one policy call per step; no human, no env adapters.

    An env's transitions are held until its episode ends, then released in order, together: the replay ring keeps
    a stream's transitions in consecutive slots (transition i's next obs is slot i+1), so whole episodes take the
    slots one env's episodes would. Interleaving the N envs step by step would break the sequence at every add
    and take two slots per transition. The price is that the learner sees an episode only once it has ended."""

    def __init__(self, env: ManiSkillVecEnv, policy: torch.nn.Module, seed: int = 0) -> None:
        self.env = env
        self.policy = policy
        self.seed = seed
        self.stats = EpisodeStats()
        self.policy_version = 0
        self._obs: NpObs | None = None
        self._episodes: list[list[Transition]] = [[] for _ in range(env.num_envs)]

    def load_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        self.policy.load_state_dict(state_dict)
        self.policy_version = version

    @torch.no_grad()
    def _act(self, obs: NpObs) -> np.ndarray:
        """(N, Da) float32: the first action of each env's chunk (SAC's chunks are one step long)."""
        device = next(self.policy.parameters()).device
        chunk = self.policy.predict_action_chunk({k: torch.as_tensor(v, device=device) for k, v in obs.items()})
        return chunk[:, 0].cpu().numpy()

    def step(self) -> list[tuple[int, Transition]]:
        """Steps every env once and resets those whose episode ended; returns the transitions of the episodes that
        ended, as (env index, transition), each episode's in order and together."""
        if self._obs is None:  # env i's first episode is seeded seed + episodes + i, later ones from the env's rng
            self._obs, _ = self.env.reset(seed=self.seed + self.stats.episodes)
        obs, action = self._obs, self._act(self._obs)
        next_obs, reward, terminated, truncated, info = self.env.step(action)
        self.stats.steps += self.env.num_envs
        ready: list[tuple[int, Transition]] = []
        for i, episode in enumerate(self._episodes):
            t = Transition(obs={k: v[i] for k, v in obs.items()}, action=action[i], reward=float(reward[i]),
                           next_obs={k: v[i] for k, v in next_obs.items()}, terminated=bool(terminated[i]),
                           truncated=bool(truncated[i]), intervened=False)  # fmt: skip
            episode.append(t)
            if t.done:
                self.stats.record(bool(info["success"][i]), len(episode), 0)
                ready += [(i, e) for e in episode]
                self._episodes[i] = []
        self._obs = self._reset_done(next_obs, np.flatnonzero(terminated | truncated))
        return ready

    def _reset_done(self, next_obs: NpObs, done: np.ndarray) -> NpObs:
        """The next step's obs: the reset envs' first obs, the others' next obs as stored (a new array: the staged
        transitions hold views of `next_obs`)."""
        if not done.size:
            return next_obs
        first, _ = self.env.reset(env_idx=done)
        obs = {k: v.copy() for k, v in next_obs.items()}
        for k, v in obs.items():
            v[done] = first[k][done]
        return obs
