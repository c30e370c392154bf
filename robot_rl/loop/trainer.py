"""The main job in one process: demos -> actor/learner loop at a fixed UTD -> evaluation -> checkpoint.

The actor and learner only meet through `Learner.add(transition)` and `Learner.policy_weights()`; the ROS 2
nodes put a transport between exactly those two calls.

A randomised sim run is judged on the nominal scene: each evaluation runs the same episode seeds under the run's
randomisation (logged as `success_rate`, ...) and on the nominal scene (`nominal_success_rate`, ...), and the stop
rule, the best evaluation and `final_success_rate` read the nominal one. Judged under its own randomisation, a
`robust` camera policy that had trained on grey tables reported 0.62 and scored 0.00 on the nominal scene (#27).
"""

from __future__ import annotations

import copy
import dataclasses
import signal
import time
from pathlib import Path

import gymnasium as gym
import torch
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from robot_rl.algos.registry import algorithm
from robot_rl.algos.reward_classifier import ClassifierReward, classifier_rewards
from robot_rl.algos.sac import SAC
from robot_rl.buffers import ReplayBuffer
from robot_rl.checkpoint import latest_checkpoint, load_checkpoint, load_initial_weights, save_checkpoint
from robot_rl.config import TrainConfig
from robot_rl.demos.collect import episode_transitions
from robot_rl.envs import make_env, make_vec_env, robot_layout
from robot_rl.evaluation import EvalResult, evaluate
from robot_rl.loop.actor import Actor, EpisodeStats, VecActor
from robot_rl.loop.adapters import make_train_env
from robot_rl.loop.checks import pick_state, state_fields
from robot_rl.loop.classifier import Refits, run_classifier
from robot_rl.loop.human import make_human
from robot_rl.loop.learner import BackgroundUpdates, Learner
from robot_rl.loop.realtime import learn_in_real_time
from robot_rl.loop.run import (
    EvalLog,
    RunState,
    prepare_demos,
    probe_states,
    reward_source,
    start_run,
    success_judge,
    write_summary,
)
from robot_rl.sim.config import is_default, nominal
from robot_rl.types import ObsLayout, Transition


class TrainingRun:
    """Everything the learner side of a run owns: run dir, demos, buffers, SAC, evaluation, checkpoints, logs.

    The in-process trainer and the ROS 2 learner node both drive it: feed `learner.add`, call
    `learner.train_to_rate_limit()`, then `after_step()` once per env step until `done`.
    """

    def __init__(self, cfg: TrainConfig, env: gym.Env | None = None) -> None:
        """`env`: evaluate in this env (a robot run's one arm, shared with the actor) instead of a fresh one. A robot
        run's learner node leaves the arm to its one actor: it evaluates nothing and takes its layout from the robot
        config, never connecting to the robot."""
        self._started = time.perf_counter()
        self.cfg = cfg
        self.run_dir, self.device, self.config_yaml = start_run(cfg)
        self.eval_env = env if env is not None or cfg.robot is not None else make_train_env(cfg, cfg.seed + 1)
        self.nominal_env = self._nominal_env() if env is None and cfg.robot is None else None
        self.layouts = self._layouts()
        self.classifier = None
        if cfg.reward.source == "classifier":
            self.classifier = run_classifier(cfg, self.run_dir, self.layouts["env"])
        self.refits = Refits(cfg, self.run_dir, self.classifier) if cfg.reward.refit_every else None
        if cfg.robot is not None and self.eval_env is not None and not cfg.robot.success_topic:
            # No success topic: the classifier that rewards training judges the evaluations (`check_config`).
            self.eval_env = ClassifierReward(self.eval_env, self.classifier)
        if self.refits is not None:
            self.refits.serve(self.eval_env)
        demo_buf = self._demo_buffer()
        online_buf = ReplayBuffer(cfg.loop.buffer_capacity, seed=cfg.seed + 1, device=self.device)
        self.algo = self._make_algo(demo_buf, online_buf)
        self.learner = Learner(self.algo, demo_buf, online_buf, cfg.loop.learning_starts, cfg.loop.critic_warmup)
        self.eval_policy = copy.deepcopy(self.algo.policy).cpu()
        self.ckpt_root = self.run_dir / "checkpoints"
        resumed = self._resume()
        self._start_logging(resumed)

    def _nominal_env(self) -> gym.Env | None:
        """The run's env on the nominal scene, where its randomisation is not the default (module docstring)."""
        cfg, rand = self.cfg, self.cfg.env.randomization
        if is_default(rand):
            return None
        return make_train_env(dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, randomization=nominal(rand))),
                              cfg.seed + 1)  # fmt: skip

    def _layouts(self) -> dict[str, ObsLayout]:
        """What the env observes ("env": what demos store and a robot provides) and what the agent's policy reads
        and emits ("policy": the same, or a residual / DSRL adapter's view of it); both go into every checkpoint."""
        env_cfg = self.cfg.env
        if self.eval_env is None or self.cfg.robot is not None:
            lay = robot_layout(env_cfg, self.cfg.robot)
            return {"env": lay, "policy": lay}
        return {
            "env": ObsLayout.of_env(self.eval_env.unwrapped, env_cfg.max_step, env_cfg.control_hz),
            "policy": ObsLayout.of_env(self.eval_env, env_cfg.max_step, env_cfg.control_hz),
        }

    def _demo_buffer(self) -> ReplayBuffer:
        """The demos as transitions, in the run's terms: the stored state fields the run observes, rewards from the
        classifier on a robot (no sim reward there), residual actions along the base (the base is re-run)."""
        cfg, buf = self.cfg, ReplayBuffer(self.cfg.loop.buffer_capacity, seed=self.cfg.seed, device=self.device)
        self.store = prepare_demos(cfg, self.run_dir) if algorithm(cfg.algo).reads_demos else None
        keys = ["state", *self.layouts["env"].cameras]  # a residual agent may hide cameras its base reads
        where = f"demos.path={cfg.demos.path}"
        for i in range(len(self.store) if self.store is not None else 0):
            episode = episode_transitions(self.store, i, keys)
            if (
                idx := state_fields(self.store.meta(i).get("state_layout"), self.layouts["env"].state, where)
            ) is not None:
                episode = (pick_state(t, idx) for t in episode)
            if cfg.robot is not None and self.classifier is not None:
                episode = classifier_rewards(episode, self.classifier)
            episode = algorithm(cfg.algo).convert_episode(self.eval_env, episode)  # e.g. as residuals
            for t in episode:
                buf.add(t)
        return buf

    def _make_algo(self, demo_buf: ReplayBuffer, online_buf: ReplayBuffer) -> SAC:
        """SAC for the policy layout, started from `init_from`'s weights (normaliser and camera trunks included) or
        with its normaliser fixed here and its trunks pretrained on the demos; frozen trunks turn frames into
        features from here on, once per frame, as they are stored."""
        cfg, lay = self.cfg, self.layouts["policy"]
        algo = SAC(cfg.sac, lay.state_dim, lay.action_dim, lay.cameras, lay.image_size)
        if cfg.init_from:
            load_initial_weights(cfg.init_from, algo, lay, self.device)
        else:
            algo.policy.encoder.set_state_normalization(self._normaliser_states(demo_buf), lay.state)
        algo.to(self.device)  # before pretraining and embedding: both run where the learner runs
        if algo.policy.encoder.frozen_trunk:
            if not cfg.init_from:
                algo.pretrain_trunk(demo_buf)
            for buf in (demo_buf, online_buf):
                algo.store_features(buf)
        return algo

    def _normaliser_states(self, demo_buf: ReplayBuffer) -> torch.Tensor:
        """The demos' states, else what the robot config allows (no arm time spent on a probe; a learner node needs
        no arm), else a few random episodes (DSRL)."""
        if len(demo_buf):
            return demo_buf.valid_states()
        if self.cfg.robot is not None:
            from robot_rl.real.robot import envelope_states

            return torch.from_numpy(envelope_states(self.cfg.robot, self.cfg.seed))
        return torch.from_numpy(probe_states(self.eval_env, self.cfg.seed))

    def _resume(self) -> bool:
        """Restores the latest checkpoint of a resumed run (weights, optimisers, buffers, counters)."""
        self.state = RunState()
        ckpt = latest_checkpoint(self.ckpt_root) if self.cfg.resume else None
        if ckpt is None:
            return False
        learner = self.learner
        buffers = {"demo": learner.demo, "online": learner.online}
        self.state = RunState(**load_checkpoint(ckpt, self.algo, self.algo.optimizers(), buffers, self.device))
        learner.env_steps, learner.updates, learner.sim_steps = (
            self.state.env_steps,
            self.state.updates,
            self.state.sim_steps,
        )
        learner.online.break_sequence()  # the interrupted episode is not continued
        learner.demo.break_sequence()
        print(
            f"resumed {self.run_dir} from {ckpt.name}: {self.state.env_steps} env steps, {self.state.updates} updates"
        )
        return True

    def _start_logging(self, resumed: bool) -> None:
        self.writer = SummaryWriter(str(self.run_dir / "tb"))
        self.eval_log = EvalLog(self.run_dir, self.state.updates if resumed else None)
        self.last_eval = float("nan")
        self._counts = (0, 0)  # the actor's (steps, intervened steps) at the last evaluation
        self.done = False
        self._session_start = time.perf_counter()
        self._wall_before = self.state.wall_clock_s
        self.state.startup_s += time.perf_counter() - self._started
        self.bar = tqdm(total=self.cfg.loop.env_steps, initial=self.learner.env_steps, desc="train", unit="step",
                        mininterval=2.0)  # fmt: skip
        self._check_budget()
        loop = self.cfg.loop
        if loop.eval_at_start and self.learner.env_steps == 0:  # the baseline (not again on a resume)
            self.evaluate(loop.final_eval_episodes, loop.final_eval_robot_minutes)

    @property
    def wall_clock_s(self) -> float:
        return self._wall_before + time.perf_counter() - self._session_start

    def _check_budget(self) -> None:
        loop = self.cfg.loop
        out_of_time = loop.max_minutes > 0 and self.state.startup_s + self.wall_clock_s >= 60.0 * loop.max_minutes
        self.done = self.done or out_of_time or self.learner.env_steps >= loop.env_steps

    def checkpoint(self, name: str, episodes: int) -> None:
        s = self.state
        s.env_steps, s.sim_steps, s.updates = self.learner.env_steps, self.learner.sim_steps, self.learner.updates
        s.episodes = episodes
        s.wall_clock_s = self.wall_clock_s
        buffers = {"demo": self.learner.demo, "online": self.learner.online}
        save_checkpoint(
            self.ckpt_root, name, self.algo, self.algo.optimizers(), vars(s), self.config_yaml, buffers, self.layouts
        )

    def evaluate(self, episodes: int, robot_minutes: float = 0.0, **extra: float) -> EvalResult | None:
        """The result the run is judged by: the nominal scene's where the run randomises (module docstring), else
        its env's. On a robot, as many of `episodes` as `robot_minutes` of arm time allow (`_robot_episodes`).
        `extra`: more entries for the evaluation log (the actor's intervention rate since the last one). None on a
        robot run's learner node: the arm is the actor's (`robot-rl deploy` evaluates a checkpoint)."""
        if self.eval_env is None:
            return None
        self.eval_policy.load_state_dict(self.learner.policy_weights())
        seed = 1_000_000 + 1000 * self.cfg.seed
        if self.cfg.robot is not None:
            episodes = self._robot_episodes(episodes, robot_minutes)
        scenes = {"": evaluate(self.eval_env, self.eval_policy, episodes, seed=seed)}  # key: the log's prefix
        if self.nominal_env is not None:
            scenes["nominal_"] = evaluate(self.nominal_env, self.eval_policy, episodes, seed=seed)
        step, learner = self.learner.env_steps, self.learner
        results = {f"{scene}{k}": v for scene, r in scenes.items() for k, v in r.as_dict().items()}
        if self.cfg.robot is not None:
            self.state.eval_robot_s += scenes[""].mean_length * scenes[""].episodes / self.layouts["env"].control_hz
            results |= self._robot_minutes()
        self.eval_log.add({"env_steps": step, "sim_steps": learner.sim_steps, "updates": learner.updates,
                           "wall_clock_s": round(self.wall_clock_s, 1), **results, **extra})  # fmt: skip
        for scene, r in scenes.items():
            for k in ("success_rate", "mean_return", "mean_length"):
                self.writer.add_scalar(f"eval/{scene}{k}", getattr(r, k), step)
        return scenes.get("nominal_", scenes[""])

    def _robot_episodes(self, episodes: int, minutes: float) -> int:
        """How many of `episodes` fit in `minutes` of arm time when each runs to its time limit (at least one; all
        with 0). A count fixed in advance keeps every evaluation on the same seeds, and stopping on time spent
        instead would favour policies whose successes end episodes early."""
        if minutes <= 0:
            return episodes
        longest_s = self.eval_env.unwrapped.max_episode_steps / self.layouts["env"].control_hz
        return max(1, min(episodes, int(60.0 * minutes / longest_s)))

    def _robot_minutes(self) -> dict[str, float]:
        """A robot run's arm time so far: in training (its env steps) and in evaluations, side by side."""
        train_s = self.learner.env_steps / self.layouts["env"].control_hz
        return {"robot_minutes_training": round(train_s / 60.0, 3),
                "robot_minutes_eval": round(self.state.eval_robot_s / 60.0, 3)}  # fmt: skip

    def after_step(self, stats: EpisodeStats) -> None:
        """Logging, checkpoints, evaluation and the stopping rule, at their env-step multiples."""
        loop, step = self.cfg.loop, self.learner.env_steps
        self.bar.update(step - self.bar.n)
        if step % loop.log_every == 0:
            for k, v in self.learner.last_stats.items():
                self.writer.add_scalar(f"train/{k}", v, step)
            self.writer.add_scalar("train/success_rate", stats.success_rate, step)
            self.writer.add_scalar("train/intervention_rate", stats.intervention_rate, step)
            self.bar.set_postfix(succ=f"{stats.success_rate:.2f}", interv=f"{stats.intervention_rate:.2f}",
                                 eval=f"{self.last_eval:.2f}", upd=self.learner.updates, refresh=False)  # fmt: skip
        if loop.checkpoint_every and step % loop.checkpoint_every == 0:
            self.checkpoint(f"step_{step:08d}", stats.episodes)
        if self.refits is not None and self.refits.due:
            self._refit()
        if loop.eval_every and step % loop.eval_every == 0 and self._policy_changed(step):
            steps, intervened = stats.steps - self._counts[0], stats.intervened_steps - self._counts[1]
            self._counts = (stats.steps, stats.intervened_steps)
            res = self.evaluate(loop.eval_episodes, loop.eval_robot_minutes,
                                intervention_rate=intervened / steps if steps else 0.0,
                                **self._refit_counts())  # fmt: skip
            self.last_eval = res.success_rate if res is not None else float("nan")
            self.state.best_eval_success = max(self.state.best_eval_success, self.last_eval)
            if self.last_eval >= loop.stop_at_success:
                self.bar.write(f"eval success {self.last_eval:.2f} >= {loop.stop_at_success} at step {step}: stopping")
                self.done = True
        self._check_budget()

    def _policy_changed(self, step: int) -> bool:
        """Whether the learner has updated since the last evaluation: re-measuring the same weights on the same
        episode seeds repeats the result and, on a robot, spends arm time on it (a warm-up before `learning_starts`)."""
        last = self.eval_log.entries[-1]["updates"] if self.eval_log.entries else None
        if self.learner.updates != last:
            return True
        self.bar.write(f"evaluation at step {step} skipped: no update since the last one")
        return False

    def _refit_counts(self) -> dict[str, int]:
        """What the evaluation log and the summary say of the refits (`Refits.counts`); nothing without them."""
        return self.refits.counts() if self.refits is not None else {}

    def _refit(self) -> None:
        t = time.perf_counter()
        rates = self.refits.refit()
        counts = self.refits.counts()
        for k, v in counts.items():
            self.writer.add_scalar(f"classifier/{k}", v, self.learner.env_steps)
        self.bar.write(f"classifier refitted on {counts['classifier_paid_judged']} judged frames "
                       f"({counts['classifier_false_positives']} false positives) in {time.perf_counter() - t:.0f} s: "
                       f"now on them {rates}")  # fmt: skip

    def finish(self, stats: EpisodeStats, interrupted: bool = False, **extra: object) -> Path:
        """Final evaluation, checkpoint and summary.json (plus `extra` entries); returns the summary's path.

        `interrupted` (Ctrl-C): no final evaluation, which could take minutes the person just said they do not
        want; the checkpoint is a step one that `resume=` continues from, and the summary says "interrupted"."""
        self.bar.close()
        step = self.learner.env_steps
        loop = self.cfg.loop
        final = None if interrupted else self.evaluate(loop.final_eval_episodes, loop.final_eval_robot_minutes)
        ckpt = f"step_{step:08d}" if interrupted else "final"
        self.checkpoint(ckpt, stats.episodes)
        self.writer.close()
        cfg, learner = self.cfg, self.learner
        summary = {
            "status": "interrupted" if interrupted else "finished",
            "task": cfg.env.task,
            "obs": cfg.env.obs,
            "seed": cfg.seed,
            "final_success_rate": final.success_rate if final else None,
            "final_success_ci": final.success_ci if final else None,
            "final_mean_length": final.mean_length if final else None,
            **self._randomized_final(final),
            "algo": cfg.algo,
            "env_steps": learner.env_steps,
            "sim_steps": learner.sim_steps,
            "updates": learner.updates,
            "critic_updates": learner.updates * cfg.sac.utd,
            "wall_clock_s": round(self.state.wall_clock_s, 2),
            "startup_s": round(self.state.startup_s, 2),
            "intervention_rate": stats.intervened_steps / max(stats.steps, 1),
            "demo_episodes": len(self.store) if self.store is not None else 0,
            "init_from": cfg.init_from or None,
            "robot": cfg.robot.name if cfg.robot is not None else None,
            # what evaluations (and, in one process, the actor) stepped; a robot learner node's actor steps a RobotEnv
            "env": type(self.eval_env.unwrapped).__name__ if self.eval_env is not None else "RobotEnv",
            "reward_source": reward_source(cfg),
            **({"success_judge": success_judge(cfg), **self._robot_minutes()} if cfg.robot is not None else {}),
            **self._refit_counts(),
            "obs_layout": {
                "state": self.layouts["env"].to_dict()["state"],
                "cameras": list(self.layouts["policy"].cameras),
            },
            "device": str(self.device),
            "run_dir": str(self.run_dir),
            "checkpoint": str(self.ckpt_root / ckpt),
            **extra,
        }
        return write_summary(self.run_dir, summary, self.eval_log.entries)

    def _randomized_final(self, final: EvalResult | None) -> dict:
        """A randomised run's final evaluation under its randomisation (`final_*` are on the nominal scene)."""
        if self.nominal_env is None:
            return {}
        last = self.eval_log.entries[-1] if final else {}
        return {f"final_{k}_randomized": last.get(k) for k in ("success_rate", "success_ci", "mean_length")}


def train(cfg: TrainConfig) -> Path:
    """The main job in one process: runs (or resumes) a run; returns the path of its summary.json."""
    # A robot is one arm: the actor and the evaluations take turns on the same env (and the same ROS node); the
    # evaluations judge success by its success topic, the actor's reward may come from a classifier around it.
    robot_env = make_env(cfg.env, cfg.seed, cfg.robot, "robot_rl_actor") if cfg.robot else None
    run = TrainingRun(cfg, env=robot_env)
    learner = run.learner
    human = make_human(cfg, cfg.seed)
    actor = _make_actor(cfg, run, robot_env, human)
    actor.stats.episodes = run.state.episodes
    actor.load_weights(learner.policy_weights(), learner.updates)
    # A robot that does not wait for us (not lockstep): the actor steps it in its own thread (loop/realtime.py).
    realtime = robot_env is not None and not cfg.robot.lockstep
    stats = EpisodeStats(episodes=run.state.episodes) if realtime else actor.stats
    background = BackgroundUpdates(learner) if cfg.loop.overlap and not realtime else None
    try:
        if realtime:
            learn_in_real_time(run, actor, stats, human)
        else:
            _learn_in_turns(run, actor, human, robot_env, background)
    except KeyboardInterrupt:  # Ctrl-C saves, as SERL and LeRobot users expect; a second one must not tear it
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if background is not None:
            background.close()  # the updates under way finish (milliseconds) before the checkpoint reads them
        return run.finish(stats, interrupted=True, **_control_summary(robot_env, stats, realtime))
    finally:
        if hasattr(human, "close"):  # a teleop device: release it (a keyboard gives the terminal back)
            human.close()
        if background is not None:
            background.close()
    extra = _control_summary(robot_env, stats, realtime)
    try:
        return run.finish(stats, **extra)
    except KeyboardInterrupt:  # during the final evaluation: the run is saved all the same, as interrupted
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        return run.finish(stats, interrupted=True, **extra)


def _learn_in_turns(
    run: TrainingRun,
    actor: Actor | VecActor,
    human: object | None,
    robot_env: gym.Env | None,
    background: BackgroundUpdates | None,
) -> None:
    """One thread (sim and lockstep runs): the actor steps, then the learner adds and updates (with `background`,
    while the actor makes its next step), evaluates and checkpoints; bit-reproducible without `background`."""
    cfg, learner = run.cfg, run.learner
    while not run.done:
        if human is not None:
            human.set_progress(learner.env_steps)
        for stream, t in _transitions(actor):  # with `background`, the actor stepped while the updates ran
            if background is not None:
                background.wait()
            learner.add(t, stream)
            if background is None:
                learner.train_to_rate_limit()
            if learner.env_steps % cfg.loop.sync_every == 0:
                actor.load_weights(learner.policy_weights(), learner.updates)
            evals = len(run.eval_log.entries)
            run.after_step(actor.stats)
            if robot_env is not None and len(run.eval_log.entries) > evals:
                actor.abandon_episode()  # the evaluation reset the arm under the actor's episode
                learner.online.break_sequence()
            if run.done:
                break
        if background is not None:
            background.start()  # the updates due for what was just added; the last ones end in `close`


def _control_summary(robot_env: gym.Env | None, stats: EpisodeStats, realtime: bool) -> dict:
    """A real-time run's control loop for summary.json: the arm's step periods and deadline misses (training and
    periodic evaluation steps) and the training episodes a hold or late data aborted."""
    if not realtime:
        return {}
    return {"control": {**robot_env.unwrapped.rate.stats(), "aborted_episodes": stats.aborted}}


def _make_actor(
    cfg: TrainConfig, run: TrainingRun, robot_env: gym.Env | None, human: object | None
) -> Actor | VecActor:
    """One env's actor, or with `loop.num_envs` > 1 the batched actor over that many ManiSkill envs."""
    if cfg.loop.num_envs > 1:
        return VecActor(make_vec_env(cfg.env, cfg.loop.num_envs), copy.deepcopy(run.algo.policy).cpu(), cfg.seed)
    if robot_env is None:
        env = make_train_env(cfg, cfg.seed, run.classifier)
    else:  # the evaluations judge success by the robot's success topic, the actor's reward may be the classifier's
        env = robot_env if run.classifier is None else ClassifierReward(robot_env, run.classifier, cfg.reward.threshold)
    actor = Actor(env, copy.deepcopy(run.algo.policy).cpu(), human, cfg.seed)
    if run.refits is not None:
        actor.judged = run.refits.judged
        run.refits.serve(env)
    return actor


def _transitions(actor: Actor | VecActor) -> list[tuple[str, Transition]]:
    """(stream, transition) for the learner from one actor step: the one env's transition, or the batch's ended
    episodes, each whole and in order under its env's stream. Each is one env step of the loop: one update due."""
    if isinstance(actor, VecActor):
        return [(f"env{i}", t) for i, t in actor.step()]
    return [("", actor.step())]
