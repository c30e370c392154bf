"""Where a run acts: a cell. What differs between a run in the simulator and one on a robot arm lives here, behind
one interface, so `TrainingRun` asks its cell and never whether it is on a robot; a driver profile or a second arm
is a new cell.

A sim cell builds fresh envs: one for evaluations (and the nominal scene beside it where the run randomises: a
randomised run is judged there, see `loop/trainer.py`), another for the actor. A robot cell has one arm, which the
actor and the evaluations take turns on; a robot run's learner node builds its cell without the arm (`acting=False`),
so it evaluates nothing and never connects to the robot.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterable
from contextlib import AbstractContextManager
from pathlib import Path

import gymnasium as gym
import torch

from robot_rl.algos.reward_classifier import ClassifierReward, RewardClassifier, classifier_rewards
from robot_rl.config import TrainConfig
from robot_rl.demos.store import EpisodeStore
from robot_rl.envs import make_env, make_vec_env, robot_layout
from robot_rl.loop.actor import Actor, EpisodeStats, VecActor
from robot_rl.loop.adapters import agent_env, make_train_env
from robot_rl.loop.run import RunState, operator_name, probe_states, reward_source, success_judge
from robot_rl.real.timing import ARM_ACTIVITIES, arm_minutes
from robot_rl.sim.config import is_default, nominal
from robot_rl.types import ObsLayout, Transition


class Cell:
    """The interface; `SimCell` and `RobotCell` fill it in.

    `eval_env`: what evaluations step (None: this process leaves the arm alone). `realtime`: the world does not wait
    for the learner, the actor owns the clock (`loop/realtime.py`). `shares_arm`: the actor and the evaluations step
    one env, so an evaluation ends the actor's episode under way."""

    eval_env: gym.Env | None = None
    realtime: bool = False
    shares_arm: bool = False

    def __init__(self, cfg: TrainConfig) -> None:
        self.cfg = cfg
        self._open = True

    def layouts(self) -> dict[str, ObsLayout]:
        """What the env observes ("env": what demos store and a robot provides) and what the agent's policy reads
        and emits ("policy": the same, or a residual / DSRL adapter's view of it); both go into every checkpoint."""
        raise NotImplementedError

    def judge_by(self, classifier: RewardClassifier | None) -> None:
        """Where success has no other judge, the run's classifier judges the evaluations."""

    def close(self) -> None:
        """Release the cell's envs: a robot's rclpy node left spinning aborts the process at exit (a C++ thread
        still joinable). A second call does nothing."""
        if not self._open:
            return
        self._open = False
        for env in self.scenes().values():
            if env is not None:
                env.close()

    def scenes(self) -> dict[str, gym.Env]:
        """The envs one evaluation runs, by the prefix of its log entries; the last one is what the run is judged by."""
        return {"": self.eval_env}

    def demo_episode(self, episode: Iterable[Transition], classifier: RewardClassifier | None) -> Iterable[Transition]:
        """A stored demo episode with the rewards this cell trains on."""
        return episode

    def normaliser_states(self) -> torch.Tensor:
        """States to fix the normaliser on when the run has no demos."""
        raise NotImplementedError

    def eval_episodes(self, episodes: int, minutes: float) -> int:
        """How many of an evaluation's `episodes` to run, given its budget of arm time."""
        return episodes

    def count_time(self, state: RunState, demos: EpisodeStore | None) -> None:
        """Where the arm's time is booked from here on: `state.arm_s`, going on from a resumed run's."""

    def busy(self, activity: str) -> AbstractContextManager[None]:
        """Around what holds the arm for `activity` (an evaluation), so its time is booked as that."""
        return contextlib.nullcontext()

    def robot_minutes(self, state: RunState, env_steps: int) -> dict[str, float]:
        """The arm time so far, by activity and whole: what the evaluation log and the summary add."""
        return {}

    def make_actor(self, policy: torch.nn.Module, human: object | None, classifier: RewardClassifier | None
                   ) -> Actor | VecActor:  # fmt: skip
        """The actor of a one-process run, acting with `policy` and rewarded by `classifier` where there is one."""
        raise NotImplementedError

    def control(self, stats: EpisodeStats) -> dict:
        """A real-time run's control loop for summary.json, as training left it."""
        return {}

    def summary(self, state: RunState, env_steps: int) -> dict:
        """This cell's entries of summary.json."""
        env = type(self.eval_env.unwrapped).__name__ if self.eval_env is not None else "RobotEnv"
        cfg = self.cfg
        return {"robot": None, "env": env, "reward_source": reward_source(cfg), "operator": operator_name(cfg)}


class SimCell(Cell):
    """Evaluations judge success by the simulator's own check, whatever rewards the actor (a classifier too)."""

    def __init__(self, cfg: TrainConfig) -> None:
        super().__init__(cfg)
        self.eval_env = agent_env(cfg, make_env(cfg.env, cfg.seed + 1))
        rand = cfg.env.randomization
        env = dataclasses.replace(cfg.env, randomization=nominal(rand))
        self.nominal_env = None if is_default(rand) else agent_env(cfg, make_env(env, cfg.seed + 1))

    def layouts(self) -> dict[str, ObsLayout]:
        env, lay = self.eval_env, self.cfg.env
        return {
            "env": ObsLayout.of_env(env.unwrapped, lay.max_step, lay.control_hz),
            "policy": ObsLayout.of_env(env, lay.max_step, lay.control_hz),
        }

    def scenes(self) -> dict[str, gym.Env]:
        return {"": self.eval_env} | ({"nominal_": self.nominal_env} if self.nominal_env is not None else {})

    def normaliser_states(self) -> torch.Tensor:
        """A few random episodes (DSRL, which reads no demos)."""
        return torch.from_numpy(probe_states(self.eval_env, self.cfg.seed))

    def make_actor(self, policy: torch.nn.Module, human: object | None, classifier: RewardClassifier | None
                   ) -> Actor | VecActor:  # fmt: skip
        """One env's actor, or with `loop.num_envs` > 1 the batched actor over that many ManiSkill envs."""
        cfg = self.cfg
        if cfg.loop.num_envs > 1:
            return VecActor(make_vec_env(cfg.env, cfg.loop.num_envs), policy, cfg.seed)
        return Actor(make_train_env(cfg, cfg.seed, classifier), policy, human, cfg.seed)


class RobotCell(Cell):
    """One arm behind its ROS 2 topics. The evaluations judge success by its success topic (else the classifier);
    the actor's reward may come from a classifier around the same arm."""

    shares_arm = True

    def __init__(self, cfg: TrainConfig, acting: bool) -> None:
        super().__init__(cfg)
        self.arm = make_env(cfg.env, cfg.seed, cfg.robot, "robot_rl_actor") if acting else None
        self.eval_env = self.arm
        self.realtime = not cfg.robot.lockstep
        self.recorder = None  # `record=FILE.mcap`: the session's topics, from before the arm's first command
        if cfg.record and acting:
            from robot_rl.real.record import SessionRecorder

            self.recorder = SessionRecorder(self.arm.unwrapped.tx, cfg.robot, unused_name(Path(cfg.record)))

    def close(self) -> None:
        if self.recorder is not None and self._open:
            self.recorder.close()  # before the arm's transport it records from
        super().close()

    def layouts(self) -> dict[str, ObsLayout]:
        """From the robot config: no arm needed (a learner node has none)."""
        lay = robot_layout(self.cfg.env, self.cfg.robot)
        return {"env": lay, "policy": lay}

    def judge_by(self, classifier: RewardClassifier | None) -> None:
        if self.eval_env is not None and not self.cfg.robot.success_topic:  # `check_config` asks for a classifier
            self.eval_env = ClassifierReward(self.eval_env, classifier)

    def demo_episode(self, episode: Iterable[Transition], classifier: RewardClassifier | None) -> Iterable[Transition]:
        """A robot has no sim reward: its demos are rewarded by the classifier where the run has one."""
        return episode if classifier is None else classifier_rewards(episode, classifier)

    def normaliser_states(self) -> torch.Tensor:
        """What the robot config allows: no arm time spent on a probe, and a learner node needs no arm."""
        from robot_rl.real.robot import envelope_states

        return torch.from_numpy(envelope_states(self.cfg.robot, self.cfg.seed))

    def eval_episodes(self, episodes: int, minutes: float) -> int:
        """How many of `episodes` fit in `minutes` of arm time when each runs to its time limit (at least one; all
        with 0). A count fixed in advance keeps every evaluation on the same seeds, and stopping on time spent
        instead would favour policies whose successes end episodes early."""
        if minutes <= 0:
            return episodes
        longest_s = self.eval_env.unwrapped.max_episode_steps / self.cfg.env.control_hz
        return max(1, min(episodes, int(60.0 * minutes / longest_s)))

    def count_time(self, state: RunState, demos: EpisodeStore | None) -> None:
        """The arm's clock books into `state.arm_s` (a checkpoint saves it); the demos count the arm time their
        collection took (`arm_s` in each episode's meta: `collect` on a robot writes it)."""
        state.arm_s = {**dict.fromkeys(ARM_ACTIVITIES, 0.0), **state.arm_s, "demos": demo_arm_s(demos)}
        if self.arm is not None:
            self.arm.unwrapped.clock.seconds = state.arm_s

    def busy(self, activity: str) -> AbstractContextManager[None]:
        return self.arm.unwrapped.clock.doing(activity)

    def robot_minutes(self, state: RunState, env_steps: int) -> dict[str, float]:
        """Every minute the arm was busy (`real.timing.ArmClock`: training, evaluations, demos, resets) and their
        sum. A learner node holds no arm: its training time is the env steps it took in at the control rate, the rest
        its actors' arms' (their resets and waits between episodes, as each last reported it)."""
        seconds = dict(state.arm_s)
        if self.arm is None:
            for arm in state.actor_arm_s.values():
                for k, v in arm.items():
                    seconds[k] = seconds.get(k, 0.0) + v
            seconds["training"] = env_steps / self.cfg.env.control_hz
        return arm_minutes(seconds)

    def make_actor(self, policy: torch.nn.Module, human: object | None, classifier: RewardClassifier | None
                   ) -> Actor:  # fmt: skip
        env = self.arm if classifier is None else ClassifierReward(self.arm, classifier, self.cfg.reward.threshold)
        return Actor(env, policy, human, self.cfg.seed)

    def control(self, stats: EpisodeStats) -> dict:
        """The arm's step periods and deadline misses (training and periodic evaluation steps) and the training
        episodes a hold or late data aborted."""
        if not self.realtime or self.arm is None:
            return {}
        return {"control": {**self.arm.unwrapped.rate.stats(), "aborted_episodes": stats.aborted}}

    def summary(self, state: RunState, env_steps: int) -> dict:
        return {**super().summary(state, env_steps), "robot": self.cfg.robot.name,
                "success_judge": success_judge(self.cfg), **self.robot_minutes(state, env_steps),
                **({"recording": str(self.recorder.path)} if self.recorder is not None else {})}  # fmt: skip


def unused_name(path: Path) -> Path:
    """`path`, or `stem-N.mcap` with the first free N: a resumed run records its next session beside the first."""
    name, n = path, 0
    while name.exists() or name.with_name(name.name + ".part").exists():
        n += 1
        name = path.with_name(f"{path.stem}-{n}{path.suffix}")
    return name


def demo_arm_s(store: EpisodeStore | None) -> float:
    """The arm time a store's episodes took to collect, as `collect` recorded it (0 for sim demos)."""
    return sum(store.meta(i).get("arm_s", 0.0) for i in range(len(store))) if store is not None else 0.0


def make_cell(cfg: TrainConfig, acting: bool = False) -> Cell:
    """The cell of `cfg`; `acting`: this process also acts (a one-process run), so a robot cell connects to the arm."""
    return RobotCell(cfg, acting) if cfg.robot is not None else SimCell(cfg)
