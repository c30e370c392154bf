"""The main job in one process: demos -> actor/learner loop at a fixed UTD -> evaluation -> checkpoint.

The actor and learner only meet through `Learner.add(transition)` and `Learner.policy_weights()`; the ROS 2
nodes put a transport between exactly those two calls.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import random
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from omegaconf import OmegaConf
from safetensors.torch import load_file
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from robot_rl import envs
from robot_rl.algos.adapters import agent_env
from robot_rl.algos.reward_classifier import (
    ClassifierReward,
    RewardClassifier,
    classifier_metrics,
    classifier_rewards,
    load_classifier,
    record_classifier_data,
    save_classifier,
    train_reward_classifier,
)
from robot_rl.algos.sac import SAC
from robot_rl.buffers import ReplayBuffer
from robot_rl.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from robot_rl.config import TrainConfig
from robot_rl.demos.collect import CollectConfig, collect_to_store, episode_transitions
from robot_rl.demos.store import EpisodeStore
from robot_rl.demos.teleop.scripted import ScriptedDevice
from robot_rl.errors import UserError
from robot_rl.evaluation import EvalResult, evaluate
from robot_rl.hardware import fastest_threads
from robot_rl.loop.actor import Actor, EpisodeStats
from robot_rl.loop.human import make_human
from robot_rl.loop.learner import Learner
from robot_rl.sim.envs import make_env, obs_layout
from robot_rl.sim.experts import ScriptedExpert
from robot_rl.types import Transition


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def default_run_dir(cfg: TrainConfig) -> Path:
    """runs/<task>-<obs>-s<seed>-<time>, with -2, -3 ... when two runs start in the same second."""
    task = cfg.env.task.replace("/", "_")  # gymnasium ids like gym_hil/PandaPickCubeBase-v0: one folder
    if cfg.robot is not None:
        task += f"-robot_{cfg.robot.name}"
    base = Path("runs") / f"{task}-{cfg.env.obs}-s{cfg.seed}-{time.strftime('%Y%m%d-%H%M%S')}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def holds_run(run_dir: Path) -> list[str]:
    """What in `run_dir` a new run would overwrite: its summary, evaluations or checkpoints."""
    return [n for n in ("summary.json", "evals.jsonl", "checkpoints") if (run_dir / n).exists()]


def check_run_dir(cfg: TrainConfig) -> None:
    """A new run never writes over an earlier one (a failed start, with only config.yaml, may be reused)."""
    if cfg.run_dir and not cfg.resume and (found := holds_run(Path(cfg.run_dir))):
        raise UserError(
            f"run_dir={cfg.run_dir} already holds a run ({', '.join(found)}): continue it with "
            f"resume={cfg.run_dir}, or pick another run_dir"
        )


def check_robot_run(cfg: TrainConfig) -> None:
    """What a run on a robot (`robot=<name>`) cannot do yet fails here, saying what to set instead."""
    if cfg.robot is None:
        return
    from robot_rl.real.config import check_robot_config

    check_robot_config(cfg.robot)
    where = f"robot={cfg.robot.name}"
    if cfg.algo != "sac":
        raise UserError(f"{where}: only algo=sac trains on a robot so far (got algo={cfg.algo})")
    if cfg.intervention.enabled and not cfg.intervention.device:
        raise UserError(f"{where}: the simulated human needs the simulator's object state; set "
                        "intervention.device=spacemouse|gamepad|keyboard|simulated (a person, or the simulated "
                        "operator on the sim robot), or intervention.enabled=false")  # fmt: skip
    if cfg.reward.source not in ("env", "classifier"):
        raise UserError(f"{where}: reward.source={cfg.reward.source}: expected env (the success topic) or classifier")
    if cfg.reward.source == "classifier" and not cfg.reward.classifier_path:
        raise UserError(f"{where}: reward.source=classifier needs reward.classifier_path: on a robot no simulator "
                        "labels frames; label them in `robot-rl collect --label-frames N` and train one with "
                        "`robot-rl classifier train`")  # fmt: skip
    try:
        envs.robot_cameras(cfg.env)
    except ValueError as e:
        raise UserError(f"{where}: {e}") from None


def expected_obs(cfg: TrainConfig) -> tuple[dict[str, tuple[int, ...]], dict[str, list[int]]]:
    """(key -> shape of one observation, state field -> [start, stop]) of the run's env; a robot's without
    connecting to it."""
    if cfg.robot is not None:
        from robot_rl.real.robot import proprio_layout

        n_state, cameras, size = envs.robot_obs_layout(cfg.env, cfg.robot)
        layout = {k: [s.start, s.stop] for k, s in proprio_layout(cfg.robot).items()}
        return {"state": (n_state,), **{c: (size, size, 3) for c in cameras}}, layout
    env = make_env(cfg.env)
    try:
        return {k: tuple(space.shape) for k, space in env.observation_space.spaces.items()}, envs.state_layout(env)
    finally:
        env.close()


def state_fields(stored: dict, wanted: dict[str, list[int]], where: str) -> np.ndarray | None:
    """Indices into a stored `state` that give the run's layout, picked by field name (a robot store records joints
    and the tracker's object pose; a robot run reads only the proprio fields); None when the layouts agree."""
    stored = {k: list(v) for k, v in (stored or {}).items()}
    if not stored or not wanted or stored == wanted:
        return None
    bad = [k for k, (a, b) in wanted.items() if k not in stored or stored[k][1] - stored[k][0] != b - a]
    if bad:
        raise UserError(f"{where} records state fields {list(stored)} without {bad}, which this run observes "
                        f"({list(wanted)}): record demos that measure them (`collect --backend robot`)")  # fmt: skip
    return np.concatenate([np.arange(*stored[k]) for k in wanted])


def check_demo_store(cfg: TrainConfig) -> None:
    """`demos.path` recorded for another task or observation layout fails here, naming both sides, before any work
    (it used to fail minutes later inside the encoder with a tensor size mismatch)."""
    if not cfg.demos.path or cfg.algo == "dsrl":  # DSRL acts in noise space and reads no demos
        return
    where = f"demos.path={cfg.demos.path}"
    with EpisodeStore(cfg.demos.path, "r") as st:
        if not len(st):
            raise UserError(f"{where}: the store holds no episodes")
        tasks = sorted({str(t) for i in range(len(st)) if (t := st.meta(i).get("task"))})
        stored = {k: st.read(k, 0, 0).shape[1:] for k in st.keys}
    if tasks and tasks != [cfg.env.task]:
        raise UserError(f"{where} holds {', '.join(tasks)} episodes but this run trains {cfg.env.task}: "
                        "pick the matching task= or store")  # fmt: skip
    wanted, layout = expected_obs(cfg)
    with EpisodeStore(cfg.demos.path, "r") as st:
        for i in range(len(st)):
            if (idx := state_fields(st.meta(i).get("state_layout"), layout, where)) is not None:
                stored["state"] = (len(idx),)
    for k, shape in wanted.items():
        if stored.get(k) != shape:
            have = f"stores {k} as {stored[k]}" if k in stored else f"has no {k!r} (it stores {', '.join(stored)})"
            raise UserError(f"{where} {have}, but {cfg.env.task} with obs={cfg.env.obs} image_size="
                            f"{cfg.env.image_size} observes {k} as {shape}")  # fmt: skip


def pick_state(t: Transition, idx: np.ndarray) -> Transition:
    return dataclasses.replace(t, obs={**t.obs, "state": t.obs["state"][idx]},
                               next_obs={**t.next_obs, "state": t.next_obs["state"][idx]})  # fmt: skip


def start_run(cfg: TrainConfig) -> tuple[Path, torch.device, str]:
    """What every training job does first (SAC and BC alike): threads pinned, the run dir with its resolved
    config.yaml, seeds. Returns (run dir, device, that config's YAML for the checkpoints)."""
    check_run_dir(cfg)
    check_robot_run(cfg)
    check_demo_store(cfg)
    torch.set_num_threads(cfg.threads or fastest_threads())
    run_dir = Path(cfg.resume or cfg.run_dir or default_run_dir(cfg))
    run_dir.mkdir(parents=True, exist_ok=True)
    config_yaml = OmegaConf.to_yaml(OmegaConf.structured(cfg))
    (run_dir / "config.yaml").write_text(config_yaml)
    seed_everything(cfg.seed)
    return run_dir, resolve_device(cfg.device), config_yaml


@dataclass
class RunState:
    """Counters that survive a resume."""

    env_steps: int = 0
    sim_steps: int = 0
    updates: int = 0
    episodes: int = 0
    wall_clock_s: float = 0.0
    best_eval_success: float = 0.0


def prepare_demos(cfg: TrainConfig, run_dir: Path) -> EpisodeStore | None:
    """Opens the configured store, or collects scripted demos into the run's own (resumable) store. A robot run
    has no scripted expert (it needs the object's pose): its demos come from `demos.path` or there are none."""
    if cfg.demos.path:
        return EpisodeStore(cfg.demos.path, mode="r")
    if cfg.robot is not None:
        return None
    env = make_env(cfg.env, seed=cfg.seed)
    store = EpisodeStore(run_dir / "demos.zarr", mode="a")
    if len(store) < cfg.demos.n_episodes:  # a resumed run tops up, continuing after the stored seeds
        collect_cfg = CollectConfig(task=cfg.env.task, success_only=True, seed=10_000 * (cfg.seed + 1))
        device = ScriptedDevice(noise_std=cfg.demos.expert_noise, seed=cfg.seed)
        collect_to_store(collect_cfg, device, store, cfg.demos.n_episodes, env=env, progress=sys.stderr)
    return store


def robot_classifier(cfg: TrainConfig, run_dir: Path, state_layout: dict[str, list[int]],
                     layout: tuple[int, tuple[str, ...], int]) -> RewardClassifier:  # fmt: skip
    """A robot run's classifier (`robot-rl classifier train`): it must read what the run observes; a copy goes into
    the run dir, which actor nodes and resumes load."""
    saved = run_dir / "reward_classifier.safetensors"
    path = str(saved) if cfg.resume and saved.exists() else cfg.reward.classifier_path
    try:
        clf, meta = load_classifier(path)
    except (OSError, ValueError) as e:
        raise UserError(f"reward.classifier_path={path}: {e}") from None
    _, cameras, image_size = layout
    reads = (meta["state_layout"], list(meta["cameras"]), meta["image_size"] if meta["cameras"] else 0)
    if reads != (state_layout, list(cameras), image_size):
        raise UserError(f"reward.classifier_path={path} reads state {meta['state_layout']}, cameras "
                        f"{meta['cameras']} at {meta['image_size']} px; this run observes {state_layout}, "
                        f"cameras {list(cameras)} at {image_size} px")  # fmt: skip
    if cfg.reward.threshold is not None:
        clf.threshold.fill_(cfg.reward.threshold)
    save_classifier(clf, saved, meta)
    return clf


def make_reward_classifier(
    cfg: TrainConfig, run_dir: Path, state_layout: dict[str, list[int]], layout: tuple[int, tuple[str, ...], int]
) -> RewardClassifier:
    """Loads `reward.classifier_path`, or trains one on scripted frames (success held after it happens) and saves it
    with the layout it reads, so actor nodes load it without building an env first."""
    state_dim, cameras, image_size = layout
    clf = RewardClassifier(state_dim, cameras, image_size)
    saved = run_dir / "reward_classifier.safetensors"
    path = cfg.reward.classifier_path or (str(saved) if saved.exists() else "")  # a resumed run keeps its own
    if path:
        clf.load_state_dict(load_file(path))
        if cfg.reward.threshold is not None:
            clf.threshold.fill_(cfg.reward.threshold)
        return clf.eval()
    holding = make_env(dataclasses.replace(cfg.env, terminate_on_success=False), seed=cfg.seed + 7)
    expert = ScriptedExpert(noise_std=cfg.demos.expert_noise, seed=cfg.seed + 7)
    data = record_classifier_data(holding, expert.act, episodes=max(cfg.demos.n_episodes, 10), seed=50_000)
    train_set, val_set = data.split(0.2, cfg.seed)
    train_reward_classifier(clf, train_set, cfg.reward.classifier_steps, seed=cfg.seed)
    clf.threshold.fill_(0.5 if cfg.reward.threshold is None else cfg.reward.threshold)
    metrics = classifier_metrics(clf, val_set)
    print(f"reward classifier on held-out frames: {metrics}")
    meta = {"state_layout": state_layout, "cameras": list(cameras), "image_size": image_size}
    save_classifier(clf, saved, {**meta, "report": {"validation_frames": metrics}})
    return clf


def make_train_env(
    cfg: TrainConfig,
    seed: int,
    clf: RewardClassifier | None = None,
    node_name: str = "robot_rl_actor",
    arm: gym.Env | None = None,
) -> gym.Env:
    """The env actors step: with a classifier, success no longer ends episodes; only its verdict does. Residual
    and DSRL agents act through their adapter around it. With `cfg.robot`, the arm behind that robot's topics
    (`robot_rl.envs`, or `arm` when the caller already holds it): its reward is its success topic, or with
    reward.source=classifier the classifier alone (the success topic is then for evaluation only)."""
    if cfg.robot is not None:
        check_robot_run(cfg)
        env = arm or agent_env(cfg, envs.make_env(cfg.env, seed, cfg.robot, node_name))
        if cfg.reward.source == "classifier":
            if clf is None:
                raise ValueError("reward.source=classifier needs a classifier (reward.classifier_path)")
            env = ClassifierReward(env, clf, cfg.reward.threshold)
        return env
    if cfg.reward.source == "env":
        return agent_env(cfg, make_env(cfg.env, seed=seed))
    if cfg.reward.source != "classifier":
        raise ValueError(f"reward.source={cfg.reward.source!r}; expected 'env' or 'classifier'")
    if clf is None:
        raise ValueError("reward.source=classifier needs a classifier (reward.classifier_path for actor nodes)")
    env = make_env(dataclasses.replace(cfg.env, terminate_on_success=False), seed=seed)
    return agent_env(cfg, ClassifierReward(env, clf, cfg.reward.threshold))


def probe_states(env: gym.Env, seed: int, episodes: int = 5) -> np.ndarray:
    """States visited by random actions: a normaliser for runs with no demos."""
    states = []
    env.action_space.seed(seed)
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed + 500_000 + ep)
        done = False
        while not done:
            states.append(obs["state"])
            obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
            done = terminated or truncated
    return np.stack(states)


class TrainingRun:
    """Everything the learner side of a run owns: run dir, demos, buffers, SAC, evaluation, checkpoints, logs.

    The in-process trainer and the ROS 2 learner node both drive it: feed `learner.add`, call
    `learner.train_to_rate_limit()`, then `after_step()` once per env step until `done`.
    """

    def __init__(self, cfg: TrainConfig, env: gym.Env | None = None) -> None:
        """`env`: evaluate in this env (a robot run's one arm, shared with the actor) instead of a fresh one."""
        self.cfg = cfg
        self.run_dir, self.device, self.config_yaml = start_run(cfg)

        if cfg.algo not in ("sac", "residual", "dsrl"):
            raise ValueError(f"algo={cfg.algo!r} is not trained by SAC; expected sac | residual | dsrl")
        if cfg.algo == "dsrl" and (cfg.intervention.enabled or cfg.sac.demo_ratio > 0):
            raise ValueError(
                "algo=dsrl acts in noise space, where env-space demos and human actions have no counterpart: "
                "set intervention.enabled=false and sac.demo_ratio=0 (as configs/algo/dsrl.yaml does)"
            )
        # A robot run's learner node leaves the arm to its one actor: it evaluates nothing and takes the observation
        # layout from the robot config (`envs.robot_obs_layout`), never connecting to the robot.
        self.eval_env = env
        if env is None and cfg.robot is None:
            self.eval_env = agent_env(cfg, envs.make_env(cfg.env, cfg.seed + 1))
        if self.eval_env is None:
            from robot_rl.real.robot import ACTION_DIM, proprio_layout

            self.state_layout = {k: [s.start, s.stop] for k, s in proprio_layout(cfg.robot).items()}
            layout, action_dim = envs.robot_obs_layout(cfg.env, cfg.robot), ACTION_DIM
        else:
            self.state_layout = envs.state_layout(self.eval_env)
            layout, action_dim = obs_layout(self.eval_env), self.eval_env.action_space.shape[0]
        self.obs_layout = layout
        self.classifier = None
        if cfg.reward.source == "classifier":
            self.classifier = (
                robot_classifier(cfg, self.run_dir, self.state_layout, layout)
                if cfg.robot is not None
                else make_reward_classifier(cfg, self.run_dir, self.state_layout, layout)
            )
        state_dim, cameras, image_size = layout
        demo_buf = ReplayBuffer(cfg.loop.buffer_capacity, seed=cfg.seed)
        online_buf = ReplayBuffer(cfg.loop.buffer_capacity, seed=cfg.seed + 1)
        self.store = None
        if cfg.algo != "dsrl":
            self.store = prepare_demos(cfg, self.run_dir)
            # A residual agent may hide cameras its base reads; demos are converted through the base, so they
            # load what the base env observes.
            base_cameras = obs_layout(self.eval_env.env)[1] if cfg.algo == "residual" else cameras
            for i in range(len(self.store) if self.store is not None else 0):
                episode = episode_transitions(self.store, i, ["state", *base_cameras])
                where = f"demos.path={cfg.demos.path}"
                if (idx := state_fields(self.store.meta(i).get("state_layout"), self.state_layout, where)) is not None:
                    episode = (pick_state(t, idx) for t in episode)
                if cfg.robot is not None and self.classifier is not None:  # no stored sim reward on a robot run
                    episode = classifier_rewards(episode, self.classifier)
                if cfg.algo == "residual":  # demos in residual terms: the base is re-run along each one
                    episode = self.eval_env.convert_episode(episode)
                for t in episode:
                    demo_buf.add(t)
        algo = SAC(cfg.sac, state_dim, action_dim, cameras, image_size)
        if len(demo_buf):
            states = demo_buf.obs["state"][demo_buf.valid]
        elif cfg.robot is not None:
            # No demos on a robot: the normaliser spans what the robot config allows (workspace, joint limits, speed
            # limits), so no arm time goes to a probe and a learner node needs no arm (a checkpoint carries it on).
            from robot_rl.real.robot import envelope_states

            states = envelope_states(cfg.robot, cfg.seed)
        else:  # DSRL: the states of a few random episodes fix the normaliser
            states = probe_states(self.eval_env, cfg.seed)
        algo.policy.encoder.set_state_normalization(torch.from_numpy(states), self.state_layout)
        if algo.policy.encoder.frozen_trunk:  # pixels become trunk features once per frame, as they are stored
            algo.pretrain_trunk(demo_buf)
            for buf in (demo_buf, online_buf):
                buf.set_frame_fn(algo.policy.encoder.embed_frames)
        self.algo = algo.to(self.device)
        self.learner = Learner(self.algo, demo_buf, online_buf, self.device, cfg.loop.learning_starts)
        self.eval_policy = copy.deepcopy(self.algo.policy).cpu()

        self.state = RunState()
        self.ckpt_root = self.run_dir / "checkpoints"
        ckpt = latest_checkpoint(self.ckpt_root) if cfg.resume else None
        if ckpt is not None:
            buffers = {"demo": demo_buf, "online": online_buf}
            self.state = RunState(**load_checkpoint(ckpt, algo, algo.optimizers(), buffers, self.device))
            self.learner.env_steps, self.learner.updates = self.state.env_steps, self.state.updates
            self.learner.sim_steps = self.state.sim_steps
            online_buf.break_sequence()  # the interrupted episode is not continued
            demo_buf.break_sequence()
            print(f"resumed {self.run_dir} from {ckpt.name}: {self.state.env_steps} env steps, "
                  f"{self.state.updates} updates")  # fmt: skip

        self.writer = SummaryWriter(str(self.run_dir / "tb"))
        self.eval_log = EvalLog(self.run_dir, self.state.updates if ckpt is not None else None)
        self.last_eval = float("nan")
        self._counts = (0, 0)  # the actor's (steps, intervened steps) at the last evaluation
        self.done = False
        self._session_start = time.perf_counter()
        self._wall_before = self.state.wall_clock_s
        self.bar = tqdm(total=cfg.loop.env_steps, initial=self.learner.env_steps, desc="train", unit="step",
                        mininterval=2.0)  # fmt: skip
        self._check_budget()
        if cfg.loop.eval_at_start and self.learner.env_steps == 0:  # the baseline (not again on a resume)
            self.evaluate(cfg.loop.final_eval_episodes)

    @property
    def wall_clock_s(self) -> float:
        return self._wall_before + time.perf_counter() - self._session_start

    def _check_budget(self) -> None:
        loop = self.cfg.loop
        out_of_time = loop.max_minutes > 0 and self.wall_clock_s >= 60.0 * loop.max_minutes
        self.done = self.done or out_of_time or self.learner.env_steps >= loop.env_steps

    def checkpoint(self, name: str, episodes: int) -> None:
        s = self.state
        s.env_steps, s.sim_steps, s.updates = self.learner.env_steps, self.learner.sim_steps, self.learner.updates
        s.episodes = episodes
        s.wall_clock_s = self.wall_clock_s
        buffers = {"demo": self.learner.demo, "online": self.learner.online}
        save_checkpoint(self.ckpt_root, name, self.algo, self.algo.optimizers(), vars(s), self.config_yaml, buffers)

    def evaluate(self, episodes: int, **extra: float) -> EvalResult | None:
        """`extra`: more entries for the evaluation log (the actor's intervention rate since the last one). None on a
        robot run's learner node: the arm is the actor's (`robot-rl deploy` evaluates a checkpoint)."""
        if self.eval_env is None:
            return None
        self.eval_policy.load_state_dict(self.learner.policy_weights())
        res = evaluate(self.eval_env, self.eval_policy, episodes, seed=1_000_000 + 1000 * self.cfg.seed)
        step, learner = self.learner.env_steps, self.learner
        self.eval_log.add({"env_steps": step, "sim_steps": learner.sim_steps, "updates": learner.updates,
                           "wall_clock_s": round(self.wall_clock_s, 1), **res.as_dict(), **extra})  # fmt: skip
        for k in ("success_rate", "mean_return", "mean_length"):
            self.writer.add_scalar(f"eval/{k}", getattr(res, k), step)
        return res

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
        if loop.eval_every and step % loop.eval_every == 0:
            steps, intervened = stats.steps - self._counts[0], stats.intervened_steps - self._counts[1]
            self._counts = (stats.steps, stats.intervened_steps)
            res = self.evaluate(loop.eval_episodes, intervention_rate=intervened / steps if steps else 0.0)
            self.last_eval = res.success_rate if res is not None else float("nan")
            self.state.best_eval_success = max(self.state.best_eval_success, self.last_eval)
            if self.last_eval >= loop.stop_at_success:
                self.bar.write(f"eval success {self.last_eval:.2f} >= {loop.stop_at_success} at step {step}: stopping")
                self.done = True
        self._check_budget()

    def finish(self, stats: EpisodeStats, interrupted: bool = False, **extra: object) -> Path:
        """Final evaluation, checkpoint and summary.json (plus `extra` entries); returns the summary's path.

        `interrupted` (Ctrl-C): no final evaluation, which could take minutes the person just said they do not
        want; the checkpoint is a step one that `resume=` continues from, and the summary says "interrupted"."""
        self.bar.close()
        step = self.learner.env_steps
        final = None if interrupted else self.evaluate(self.cfg.loop.final_eval_episodes)
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
            "algo": cfg.algo,
            "env_steps": learner.env_steps,
            "sim_steps": learner.sim_steps,
            "updates": learner.updates,
            "critic_updates": learner.updates * cfg.sac.utd,
            "wall_clock_s": round(self.state.wall_clock_s, 2),
            "intervention_rate": stats.intervened_steps / max(stats.steps, 1),
            "demo_episodes": len(self.store) if self.store is not None else 0,
            "robot": cfg.robot.name if cfg.robot is not None else None,
            # what evaluations (and, in one process, the actor) stepped; a robot learner node's actor steps a RobotEnv
            "env": type(self.eval_env.unwrapped).__name__ if self.eval_env is not None else "RobotEnv",
            # where reward came from: the sim's own check, a robot's success topic, or a classifier (whose
            # threshold and held-out rates are saved with it); on a robot success is judged by its topic
            "reward_source": reward_source(cfg),
            "obs_layout": {"state": self.state_layout, "cameras": list(self.obs_layout[1])},
            "device": str(self.device),
            "run_dir": str(self.run_dir),
            "checkpoint": str(self.ckpt_root / ckpt),
            "evals": self.eval_log.entries,
            **extra,
        }
        path = self.run_dir / "summary.json"
        path.write_text(json.dumps(summary, indent=1))
        print_eval_table(self.eval_log.entries)
        if interrupted:
            print(f"interrupted at env step {step}: saved {self.ckpt_root / ckpt} and {path}; "
                  f"continue with: robot-rl train resume={self.run_dir}", file=sys.stderr)  # fmt: skip
        return path


def reward_source(cfg: TrainConfig) -> str:
    if cfg.reward.source == "classifier":
        return "classifier" + (" + operator keys" if cfg.intervention.enabled and cfg.intervention.device
                               and cfg.reward.keys else "")  # fmt: skip
    return f"{cfg.robot.success_topic} topic" if cfg.robot is not None else cfg.reward.source


def train(cfg: TrainConfig) -> Path:
    """The main job in one process: runs (or resumes) a run; returns the path of its summary.json."""
    # A robot is one arm: the actor and the evaluations take turns on the same env (and the same ROS node); the
    # evaluations judge success by its success topic, the actor's reward may come from a classifier around it.
    check_robot_run(cfg)
    robot_env = agent_env(cfg, envs.make_env(cfg.env, cfg.seed, cfg.robot, "robot_rl_actor")) if cfg.robot else None
    run = TrainingRun(cfg, env=robot_env)
    learner = run.learner
    human = make_human(cfg, cfg.seed)
    env = make_train_env(cfg, cfg.seed, run.classifier, arm=robot_env)
    actor = Actor(env, copy.deepcopy(run.algo.policy).cpu(), human, cfg.seed)
    actor.stats.episodes = run.state.episodes
    actor.load_weights(learner.policy_weights(), learner.updates)
    try:
        while not run.done:
            if human is not None:
                human.set_progress(learner.env_steps)
            learner.add(actor.step())
            learner.train_to_rate_limit()
            if learner.env_steps % cfg.loop.sync_every == 0:
                actor.load_weights(learner.policy_weights(), learner.updates)
            evals = len(run.eval_log.entries)
            run.after_step(actor.stats)
            if robot_env is not None and len(run.eval_log.entries) > evals:
                actor.abandon_episode()  # the evaluation reset the arm under the actor's episode
                learner.online.break_sequence()
    except KeyboardInterrupt:  # Ctrl-C saves, as SERL and LeRobot users expect; a second one must not tear it
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        return run.finish(actor.stats, interrupted=True)
    finally:
        if hasattr(human, "close"):  # a teleop device: release it (a keyboard gives the terminal back)
            human.close()
    try:
        return run.finish(actor.stats)
    except KeyboardInterrupt:  # during the final evaluation: the run is saved all the same, as interrupted
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        return run.finish(actor.stats, interrupted=True)


class EvalLog:
    """Evaluation entries, also appended to `run_dir/evals.jsonl` as they happen, so a resumed run's summary
    has the whole curve. Entries past the checkpoint a run resumes from are dropped: that stretch is redone."""

    def __init__(self, run_dir: Path, resumed_updates: int | None) -> None:
        self.path = run_dir / "evals.jsonl"
        lines = self.path.read_text().splitlines() if resumed_updates is not None and self.path.exists() else []
        self.entries = [e for e in map(json.loads, filter(None, lines)) if e["updates"] <= resumed_updates]
        self.path.write_text("".join(json.dumps(e) + "\n" for e in self.entries))

    def add(self, entry: dict) -> None:
        self.entries.append(entry)
        with self.path.open("a") as f:
            f.write(json.dumps(entry) + "\n")


def print_eval_table(evals: list[dict]) -> None:
    print(f"{'env steps':>10} {'updates':>8} {'success':>8} {'95% CI':>13} {'return':>7} {'length':>7}")
    for e in evals:
        lo, hi = e["success_ci"]
        print(
            f"{e['env_steps']:>10} {e['updates']:>8} {e['success_rate']:>8.2f} {f'[{lo:.2f},{hi:.2f}]':>13} "
            f"{e['mean_return']:>7.2f} {e['mean_length']:>7.1f}"
        )
