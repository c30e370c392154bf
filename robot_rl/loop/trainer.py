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
import signal
import time
from pathlib import Path

from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from robot_rl.algos.registry import algorithm
from robot_rl.algos.sac import SAC
from robot_rl.buffers import ReplayBuffer, episode_transitions
from robot_rl.checkpoint import Checkpoint, latest_checkpoint, save_checkpoint
from robot_rl.config import TrainConfig
from robot_rl.evaluation import EvalResult
from robot_rl.loop.actor import Actor, EpisodeStats, VecActor
from robot_rl.loop.cells import make_cell
from robot_rl.loop.checks import pick_state, state_fields
from robot_rl.loop.classifier import Refits, run_classifier
from robot_rl.loop.human import make_human
from robot_rl.loop.learner import BackgroundUpdates, Learner
from robot_rl.loop.realtime import learn_in_real_time
from robot_rl.loop.run import EvalLog, Evaluations, RunState, prepare_demos, start_run, write_summary
from robot_rl.types import Transition


class TrainingRun:
    """Everything the learner side of a run owns: run dir, demos, buffers, SAC, evaluation, checkpoints, logs; what
    depends on where the run acts, its cell's (`loop/cells.py`).

    The in-process trainer and the ROS 2 learner node both drive it: feed `learner.add`, call
    `learner.train_to_rate_limit()`, then `after_step()` once per env step until `done`.
    """

    def __init__(self, cfg: TrainConfig, acting: bool = False) -> None:
        """`acting`: this process also runs the actor (`train`), so a robot cell connects to its arm; a learner
        node's does not (`make_cell`)."""
        self._started = time.perf_counter()
        self.cfg = cfg
        self.run_dir, self.device, self.config_yaml = start_run(cfg)
        self.cell = make_cell(cfg, acting)
        self.layouts = self.cell.layouts()
        self.classifier = None
        if cfg.reward.source == "classifier":
            self.classifier = run_classifier(cfg, self.run_dir, self.layouts["env"])
        self.refits = Refits(cfg, self.run_dir, self.classifier) if cfg.reward.refit_every else None
        self.cell.judge_by(self.classifier)
        if self.refits is not None:
            self.refits.serve(self.cell.eval_env)
        demo_buf = self._demo_buffer()
        online_buf = ReplayBuffer(cfg.loop.buffer_capacity, seed=cfg.seed + 1, device=self.device)
        self.algo = self._make_algo(demo_buf, online_buf)
        self.learner = Learner(self.algo, demo_buf, online_buf, cfg.loop.learning_starts, cfg.loop.critic_warmup)
        self.ckpt_root = self.run_dir / "checkpoints"
        resumed = self._resume()
        self.cell.count_time(self.state, self.store)
        self._start_logging(resumed)

    def _demo_buffer(self) -> ReplayBuffer:
        """The demos as transitions, in the run's terms: the stored state fields the run observes, the cell's
        rewards, residual actions along the base (the base is re-run)."""
        cfg, buf = self.cfg, ReplayBuffer(self.cfg.loop.buffer_capacity, seed=self.cfg.seed, device=self.device)
        self.store = prepare_demos(cfg, self.run_dir) if algorithm(cfg.algo).reads_demos else None
        keys = ["state", *self.layouts["env"].cameras]  # a residual agent may hide cameras its base reads
        where = f"demos.path={cfg.demos.path}"
        for i in range(len(self.store) if self.store is not None else 0):
            episode = episode_transitions(self.store, i, keys)
            idx = state_fields(self.store.meta(i).get("state_layout"), self.layouts["env"].state, where)
            if idx is not None:
                episode = (pick_state(t, idx) for t in episode)
            episode = self.cell.demo_episode(episode, self.classifier)
            episode = algorithm(cfg.algo).convert_episode(self.cell.eval_env, episode)  # e.g. as residuals
            for t in episode:
                buf.add(t)
        return buf

    def _make_algo(self, demo_buf: ReplayBuffer, online_buf: ReplayBuffer) -> SAC:
        """SAC for the policy layout, started from `init_from`'s weights (normaliser and camera trunks included) or
        with its normaliser fixed here (the demos' states, else the cell's) and its trunks pretrained on the demos;
        frozen trunks turn frames into features from here on, once per frame, as they are stored."""
        cfg, lay = self.cfg, self.layouts["policy"]
        algo = SAC(cfg.sac, lay.state_dim, lay.action_dim, lay.cameras, lay.image_size)
        if cfg.init_from:
            Checkpoint(cfg.init_from).start(algo, cfg, lay, self.device)
        else:
            states = demo_buf.valid_states() if len(demo_buf) else self.cell.normaliser_states()
            algo.policy.encoder.set_state_normalization(states, lay.state)
        algo.to(self.device)  # before pretraining and embedding: both run where the learner runs
        if algo.policy.encoder.frozen_trunk:
            if not cfg.init_from:
                algo.pretrain_trunk(demo_buf)
            for buf in (demo_buf, online_buf):
                algo.store_features(buf)
        return algo

    def _resume(self) -> bool:
        """Restores the latest checkpoint of a resumed run (weights, optimisers, buffers, counters)."""
        self.state = RunState()
        ckpt = latest_checkpoint(self.ckpt_root) if self.cfg.resume else None
        if ckpt is None:
            return False
        learner, s = self.learner, self.state
        buffers = {"demo": learner.demo, "online": learner.online}
        self.state = s = RunState.of(Checkpoint(ckpt).restore(self.algo, self.algo.optimizers(), buffers, self.device))
        learner.env_steps, learner.updates, learner.sim_steps = s.env_steps, s.updates, s.sim_steps
        learner.online.break_sequence()  # the interrupted episode is not continued
        learner.demo.break_sequence()
        print(f"resumed {self.run_dir} from {ckpt.name}: {s.env_steps} env steps, {s.updates} updates")
        return True

    def _start_logging(self, resumed: bool) -> None:
        self.writer = SummaryWriter(str(self.run_dir / "tb"))
        log = EvalLog(self.run_dir, self.state.updates if resumed else None)
        self.evals = Evaluations(self.cell, copy.deepcopy(self.algo.policy).cpu(), self.cfg.seed, log, self.writer)
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
        s.episodes, s.wall_clock_s = episodes, self.wall_clock_s
        save_checkpoint(self.ckpt_root, name, self.algo, self.algo.optimizers(), vars(s), self.config_yaml,
                        {"demo": self.learner.demo, "online": self.learner.online}, self.layouts)  # fmt: skip

    def evaluate(self, episodes: int, robot_minutes: float = 0.0, **extra: float) -> EvalResult | None:
        """The current policy's evaluation (`Evaluations.run`); `extra`: more entries for its log."""
        learner = self.learner
        counters = {"env_steps": learner.env_steps, "sim_steps": learner.sim_steps, "updates": learner.updates,
                    "wall_clock_s": round(self.wall_clock_s, 1)}  # fmt: skip
        return self.evals.run(learner.policy_weights(), counters, self.state, episodes, robot_minutes, **extra)

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
        if self.refits is not None and self.refits.due(self.learner.updates):
            self.refits.refit_and_log(self.writer, self.bar.write, step, self.learner.updates)
        if loop.eval_every and step % loop.eval_every == 0 and self._changed(step):
            steps, intervened = stats.steps - self._counts[0], stats.intervened_steps - self._counts[1]
            self._counts = (stats.steps, stats.intervened_steps)
            res = self.evaluate(loop.eval_episodes, loop.eval_robot_minutes,
                                intervention_rate=intervened / steps if steps else 0.0,
                                **self._refit_counts())  # fmt: skip
            self.last_eval = res.success_rate if res is not None else float("nan")
            self.state.best_eval_success = max(self.state.best_eval_success, self.last_eval)
            if self.last_eval >= loop.stop_at_success and res.conclusive:  # confirmed on fresh seeds (`confirms`)
                fresh = self.evaluate(loop.confirm_episodes, confirm=True) if loop.confirm_episodes else None
                self.done = self.evals.confirms(fresh, self.last_eval, step, self.bar.write)
        self._check_budget()

    def _changed(self, step: int) -> bool:
        if self.evals.changed(self.learner.updates):
            return True
        self.bar.write(f"evaluation at step {step} skipped: no update since the last one")
        return False

    def _refit_counts(self) -> dict[str, int]:
        """What the evaluation log and the summary say of the refits (`Refits.counts`); nothing without them."""
        return self.refits.counts() if self.refits is not None else {}

    def close(self) -> None:
        """Ends the progress bar, the logs and the cell (a robot run's session recording is complete from here)."""
        self.bar.close()
        self.writer.close()
        self.cell.close()

    def finish(self, stats: EpisodeStats, interrupted: bool = False, **extra: object) -> Path:
        """Final evaluation, checkpoint and summary.json (plus `extra` entries); returns the summary's path.

        `interrupted` (Ctrl-C): no final evaluation, which could take minutes the person just said they do not
        want; the checkpoint is a step one that `resume=` continues from, and the summary says "interrupted"."""
        self.bar.close()
        cfg, loop, learner, lay = self.cfg, self.cfg.loop, self.learner, self.layouts
        final = None if interrupted else self.evaluate(loop.final_eval_episodes, loop.final_eval_robot_minutes)
        ckpt = f"step_{learner.env_steps:08d}" if interrupted else "final"
        self.checkpoint(ckpt, stats.episodes)
        self.close()
        summary = {
            "status": "interrupted" if interrupted else "finished",
            "task": cfg.env.task, "obs": cfg.env.obs, "seed": cfg.seed, "algo": cfg.algo,
            "init_from": cfg.init_from or None,
            **self.evals.final(final),
            "env_steps": learner.env_steps,
            "sim_steps": learner.sim_steps,
            "updates": learner.updates,
            "critic_updates": learner.updates * cfg.sac.utd, "replay_ratio": round(learner.replay_ratio, 3),
            "wall_clock_s": round(self.state.wall_clock_s, 2),
            "startup_s": round(self.state.startup_s, 2),
            "intervention_rate": stats.intervened_steps / max(stats.steps, 1),
            "demo_episodes": len(self.store) if self.store is not None else 0,
            **self.cell.summary(self.state, learner.env_steps),
            **self._refit_counts(),
            "obs_layout": {"state": lay["env"].to_dict()["state"], "cameras": list(lay["policy"].cameras)},
            "device": str(self.device),
            "run_dir": str(self.run_dir),
            "checkpoint": str(self.ckpt_root / ckpt),
            **extra,
        }  # fmt: skip
        return write_summary(self.run_dir, summary, self.evals.log.entries)


def train(cfg: TrainConfig) -> Path:
    """The main job in one process: runs (or resumes) a run; returns the path of its summary.json."""
    run = TrainingRun(cfg, acting=True)
    cell, learner = run.cell, run.learner
    human = make_human(cfg, cfg.seed)
    actor = cell.make_actor(copy.deepcopy(run.algo.policy).cpu(), human, run.classifier)
    if run.refits is not None and isinstance(actor, Actor):
        actor.judged = run.refits.judged
        run.refits.serve(actor.env)
    actor.stats.episodes = run.state.episodes
    actor.load_weights(learner.policy_weights(), learner.updates)
    stats = EpisodeStats(episodes=run.state.episodes) if cell.realtime else actor.stats
    background = BackgroundUpdates(learner) if cfg.loop.overlap and not cell.realtime else None
    try:
        if cell.realtime:  # the world does not wait for us: the actor steps it in its own thread
            learn_in_real_time(run, actor, stats, human)
        else:
            _learn_in_turns(run, actor, human, background)
    except KeyboardInterrupt:  # Ctrl-C saves, as SERL and LeRobot users expect; a second one must not tear it
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if background is not None:
            background.close()  # the updates under way finish (milliseconds) before the checkpoint reads them
        return run.finish(stats, interrupted=True, **cell.control(stats))
    finally:
        if hasattr(human, "close"):  # a teleop device: release it (a keyboard gives the terminal back)
            human.close()
        if background is not None:
            background.close()
    extra = cell.control(stats)  # training's, before the final evaluation steps the arm
    try:
        return run.finish(stats, **extra)
    except KeyboardInterrupt:  # during the final evaluation: the run is saved all the same, as interrupted
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        return run.finish(stats, interrupted=True, **extra)


def _learn_in_turns(run: TrainingRun, actor: Actor | VecActor, human: object | None,
                    background: BackgroundUpdates | None) -> None:  # fmt: skip
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
            evals = len(run.evals.log.entries)
            run.after_step(actor.stats)
            if run.cell.shares_arm and len(run.evals.log.entries) > evals:
                actor.abandon_episode()  # the evaluation reset the arm under the actor's episode
                learner.online.break_sequence()
            if run.done:
                break
        if background is not None:
            background.start()  # the updates due for what was just added; the last ones end in `close`


def _transitions(actor: Actor | VecActor) -> list[tuple[str, Transition]]:
    """(stream, transition) for the learner from one actor step: the one env's transition, or the batch's ended
    episodes, each whole and in order under its env's stream. Each is one env step of the loop: one update due."""
    if isinstance(actor, VecActor):
        return [(f"env{i}", t) for i, t in actor.step()]
    return [("", actor.step())]
