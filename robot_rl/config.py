"""Structured configs: every key is typed, so a wrong key or type fails at start-up, not mid-run.

The dataclasses flow straight into constructors (`SAC(cfg.sac, ...)`, `make_env(cfg.env)`); the YAML
files in `configs/` only choose between groups (task, obs, profile).
"""

from __future__ import annotations

import dataclasses
import difflib
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from robot_rl.algos.dsrl import DSRLConfig
from robot_rl.algos.registry import ALGORITHMS, Algorithm, algorithm
from robot_rl.algos.residual import ResidualConfig
from robot_rl.algos.sac import SACConfig
from robot_rl.errors import ConfigError
from robot_rl.policies.chunked import ChunkPolicyConfig
from robot_rl.real.config import ROBOTS, RobotConfig, UnknownRobotError, load_robot_config
from robot_rl.sim.config import (
    ARMS,
    OBS_FRAMES,
    OBS_MODES,
    OPERATORS,
    REWARDS,
    SIM_ARM_JOINTS,
    SIMS,
    TRIGGERS,
    EnvConfig,
    InterventionConfig,
    PersonConfig,
    is_default,
)  # fmt: skip
from robot_rl.transport.base import PlaneConfig, TransportConfig


@dataclass
class DemoConfig:
    n_episodes: int = 20  # scripted demos collected into the run's zarr store before training
    path: str = ""  # use this existing zarr store (e.g. teleop demos) instead of collecting
    expert_noise: float = 0.1  # action noise of the scripted expert, for state coverage


@dataclass
class RewardConfig:
    source: str = "env"  # env | classifier (a learned success detector replaces the env reward, as on a robot)
    # trained classifier (`robot-rl classifier train` on a robot); empty in sim => train one on scripted frames
    classifier_path: str = ""
    # success probability above which the classifier says "done"; None => the one saved with it (`classifier
    # train` picks it for a low false-positive rate; 0.5 for one trained at start-up)
    threshold: Optional[float] = None  # noqa: UP045 (OmegaConf reads the annotation)
    classifier_steps: int = 1500  # training steps when the classifier is trained at start-up
    keys: bool = True  # the intervention device's success / failure keys override the reward (a person's verdict)
    # A robot run's person judges each frame the classifier pays for; every this many verdicts the classifier is
    # refitted on them and its training store (`loop.classifier.Refits`), no sooner than `refit_steps` learner
    # updates after the last refit; 0: never.
    refit_every: int = 0
    refit_steps: int = 200  # gradient steps of a refit, from the current weights
    verdict_s: float = 1.5  # how long a person has to press the success key when the classifier pays (else: no)


@dataclass
class HumanConfig(InterventionConfig):
    """Who acts besides the policy. `device` empty: the simulated human (sim runs: it reads the simulator's state,
    with the trigger / rate settings above); a teleop device (spacemouse | gamepad | keyboard, or `simulated`, an
    operator on the sim robot that follows the same settings) takes over whenever its intervene toggle is on."""

    device: str = ""
    # The simulated operator (device=simulated) presses its success / failure keys when the sim robot's own success
    # topic changes, which is the simulator's check, not a person's judgement: its keys count (as `reward.keys`
    # lets a person's) only with this set. Off, it drives and takes over, and the reward is the classifier's alone.
    success_from_sim: bool = False
    # Who the simulated operator is: `oracle` reads the simulator's exact poses and success flag and acts the step
    # it is triggered; `person` has a person's limits (`person`: reaction time, late and sometimes wrong verdicts,
    # missed triggers, pose estimates). Oracle by default, so a bench's numbers keep meaning what they meant.
    operator: str = "oracle"
    person: PersonConfig = field(default_factory=PersonConfig)


@dataclass
class LoopConfig:
    env_steps: int = 8000  # online env-step budget
    # With demos in the mix, learning can start at once (RLPD). From a sim checkpoint on a robot (`init_from`), a
    # warm-up lets its policy fill the buffer on the arm before the critic and actor move (WSRL; #28's bench).
    learning_starts: int = 0
    # Updates after `learning_starts` that train the critic alone, the actor and temperature held: a critic from
    # another place (a sim checkpoint on the arm) fits the arm's data before its gradient moves the actor. Off by
    # default: it showed no gain from a PickCube sim checkpoint (docs/log/benchmarks.md, "Sim to robot").
    critic_warmup: int = 0
    sync_every: int = 1  # env steps between weight pushes from learner to actor
    # The learner's updates in a thread, overlapping the actor's next env step (one update more policy lag; not
    # bit-reproducible: two threads share torch's RNG). profile=gpu turns it on: the GPU computes while the sim steps.
    overlap: bool = False
    eval_every: int = 1000  # env steps between evaluations (skipped when nothing was updated since the last one)
    # evaluate the untrained policy at env step 0 on the final evaluation's episodes: the baseline, in the same run
    eval_at_start: bool = False
    eval_episodes: int = 20
    final_eval_episodes: int = 50
    # Robot runs only (a sim evaluation costs no arm time): the robot-minutes (env steps / control rate) one
    # periodic evaluation, and the baseline or final one, may take. Each runs as many of its episodes as fit when
    # every one lasts its time limit, at least one; 0 = no cap. 20 + 50 episodes of 5 s cost more arm time than a
    # 5-minute run trained (#28).
    eval_robot_minutes: float = 1.0
    final_eval_robot_minutes: float = 2.0
    stop_at_success: float = 0.95  # end early once a periodic evaluation reaches this (>1 disables) ...
    # ... and a fresh-seed evaluation of this many episodes (seeds no other evaluation of the run uses) confirms it:
    # at a true 0.75 one 9/10 comes up one time in four. 0: the first crossing ends the run. A robot's costs arm time,
    # so it ends at the failure after which it can no longer pass.
    confirm_episodes: int = 40
    # wall-clock budget for this run: each session's start-up (env, demos, trunk pretraining) and resumes included
    max_minutes: float = 0.0  # (0 = none); the final evaluation comes after it
    checkpoint_every: int = 2000  # env steps; 0 => only at the end
    buffer_capacity: int = 200_000
    log_every: int = 100  # env steps between tensorboard scalar writes
    # envs one batched actor steps (sim=maniskill, algo=sac, no simulated human): PhysX GPU with CUDA, else CPU
    # scenes in turn; each env step still earns one learner update. 1: the single-env actor, as before
    num_envs: int = 1


@dataclass
class DistributedConfig:
    """Actor and learner nodes over ROS 2 (`robot-rl launch | learner | actor`)."""

    n_actors: int = 2  # actor processes `robot-rl launch` starts (and restarts when they die); one per arm on a robot
    publish_every: int = 10  # learner updates between weight broadcasts (and sooner whenever it runs out of data)
    learner_timeout_s: float = 5.0  # waiting this long for weights means the learner is gone
    # continue (act on the last weights) | hold (stop stepping until it returns; always on a robot: the arm holds)
    on_learner_loss: str = "continue"
    control_hz: float = 0.0  # actor loop rate; 0 = as fast as the env steps (sim), 10-50 on a robot
    # A learner of real-time robots trains at most this long before it takes in the transitions waiting: a slow
    # learner lowers its replay ratio (summary.json's `replay_ratio`) rather than holding the arms' data back.
    # Lockstep robots and sims wait for its weights instead (`steps_per_version`): it trains to sac.utd first.
    ingest_every_s: float = 0.1
    # Learner ranks (loop/ranks.py): data-parallel SAC over torch.distributed (gloo on CPUs, NCCL on GPUs), each
    # rank training on the transitions of the actors whose index modulo this is its rank; rank 0 is the run. The
    # learner starts the others on its machine; across machines torchrun does, and each rank reads `demos.path`
    # (zenoh plane only).
    learners: int = 1

    @property
    def steps_per_version(self) -> int:
        """An actor steps at most this often on one policy version, so all actors together make about what the
        learner consumes between broadcasts: policy lag stays ~publish_every steps however fast the sims run."""
        return max(1, self.publish_every // self.n_actors)

    batch_size: int = 8  # transitions per message
    queue_batches: int = 4  # messages in flight before actors block: bounds policy lag to ~queue x batch steps
    local: bool = True  # launch: all nodes on this machine, DDS discovery on loopback only
    # What carries transitions, weights and episode summaries between the nodes (`nodes/links.py`): zenoh (`zenoh`:
    # acknowledged transitions, weights pulled by version, run ids, TLS off loopback) | ros2 (the bulk socket and
    # DDS, `transport`; kept for one release). A robot cell's own topics are ROS 2 either way.
    plane: str = "zenoh"
    # With robot=: the ROS domains of the robot cells `launch` drives, one actor each on the one learner (every
    # cell the same robot config; each arm's driver on its own domain). Empty: the one cell on robot.domain_id.
    cell_domains: list[int] = field(default_factory=list)
    # With robot=: launch also serves each cell's stand-in (`robot-rl sim-robot` with the robot config, on the
    # cell's domain; restarted when it dies), so a fleet of sim robots is one command.
    standins: bool = False
    transport: TransportConfig = field(default_factory=TransportConfig)
    zenoh: PlaneConfig = field(default_factory=PlaneConfig)


@dataclass
class BCConfig:
    """Behaviour cloning of an action-chunk policy from the demo store (`algo=bc_diffusion | bc_mlp`)."""

    policy: ChunkPolicyConfig = field(default_factory=ChunkPolicyConfig)
    steps: int = 3000  # gradient steps
    batch_size: int = 256
    lr: float = 3e-4
    weight_decay: float = 1e-6
    ema_decay: float = 0.995  # the evaluated and saved policy is this EMA of the weights (diffusion_policy)
    eval_every: int = 1000  # gradient steps between sim evaluations
    val_fraction: float = 0.1  # demo episodes held out for the validation loss (none with fewer than 5)


@dataclass
class TrainConfig:
    algo: str = "sac"  # sac (HIL-SERL) | bc (imitation) | residual (SAC on a frozen base) | dsrl (SAC in noise space)
    env: EnvConfig = field(default_factory=EnvConfig)
    # `robot=<name>` (configs/robot/): act on that arm through its ROS 2 topics instead of the in-process simulator,
    # e.g. `robot=sim robot.lockstep=true` against `robot-rl sim-robot --lockstep`; None => simulate (env.sim)
    robot: Optional[RobotConfig] = None  # noqa: UP045 (OmegaConf reads the annotation)
    sac: SACConfig = field(default_factory=SACConfig)
    bc: BCConfig = field(default_factory=BCConfig)
    residual: ResidualConfig = field(default_factory=ResidualConfig)
    dsrl: DSRLConfig = field(default_factory=DSRLConfig)
    intervention: HumanConfig = field(default_factory=HumanConfig)
    demos: DemoConfig = field(default_factory=DemoConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    loop: LoopConfig = field(default_factory=LoopConfig)
    distributed: DistributedConfig = field(default_factory=DistributedConfig)
    seed: int = 0
    device: str = "auto"  # auto | cpu | cuda[:N]
    # torch intra-op threads; 0 => the count a learner-shaped step runs fastest at, measured at start-up: on a small
    # shared box a second thread is as often a loss as a gain, and oversubscribed OpenMP threads crawl
    threads: int = 0
    run_dir: str = ""  # empty => runs/<task>-<obs>-s<seed>-<time>
    resume: str = ""  # a run directory to continue from its latest checkpoint
    # A run dir or checkpoint folder whose actor, critic, camera trunks and state normaliser this run starts from
    # (a robot run from its sim policy: docs/sim_to_real.md). Its layout must be this run's; optimisers and replay
    # start fresh, the trunks are not pretrained again. Ignored on a resume, whose checkpoint holds them all.
    init_from: str = ""
    # A robot run records its session (the arm's topics and our commands, as they went over the wire) to this rosbag2
    # MCAP file: `ros2 bag`, Foxglove and `robot-rl convert session` open it (real/record.py). "": none.
    record: str = ""

    @property
    def keys_count(self) -> bool:
        """Whether the intervention device's success / failure keys override the reward: a person's with
        `reward.keys`, the simulated operator's (the sim's own success check) only with `success_from_sim` too."""
        c = self.intervention
        return c.enabled and bool(c.device) and self.reward.keys and (c.device != "simulated" or c.success_from_sim)


# Lowest value that makes sense for each numeric key a person commonly sets; anything below fails at start-up.
MINIMUM = {
    "loop.env_steps": 1,
    "loop.learning_starts": 0,
    "loop.critic_warmup": 0,
    "loop.sync_every": 1,
    "loop.eval_every": 0,
    "loop.eval_episodes": 1,
    "loop.final_eval_episodes": 1,
    "loop.confirm_episodes": 0,
    "loop.eval_robot_minutes": 0,
    "loop.final_eval_robot_minutes": 0,
    "loop.max_minutes": 0,
    "loop.checkpoint_every": 0,
    "loop.buffer_capacity": 1,
    "loop.log_every": 1,
    "loop.num_envs": 1,
    "demos.n_episodes": 0,
    "reward.refit_every": 0,
    "reward.refit_steps": 1,
    "reward.verdict_s": 0,
    "intervention.person.reaction_s": 0,
    "intervention.person.verdict_delay_s": 0,
    "intervention.person.pose_noise_m": 0,
    "intervention.person.pose_jitter_m": 0,
    "distributed.n_actors": 1,
    "sac.batch_size": 1,
    "sac.utd": 1,
    "sac.stored_views": 1,
    "sac.anchor": 0.0,
    "bc.steps": 1,
    "bc.batch_size": 1,
    "seed": 0,
    "threads": 0,
}


# Every key with a fixed set of values, and those values.
CHOICES = {
    "algo": tuple(ALGORITHMS),
    "env.sim": SIMS,
    "env.obs": OBS_MODES,
    "env.arm": ARMS,
    "env.obs_frame": OBS_FRAMES,
    "env.reward": REWARDS,
    "reward.source": ("env", "classifier"),
    "intervention.trigger": TRIGGERS,
    "intervention.device": ("", "spacemouse", "gamepad", "keyboard", "simulated"),
    "intervention.operator": OPERATORS,
    "distributed.on_learner_loss": ("continue", "hold"),
    "distributed.plane": ("ros2", "zenoh"),
    "bc.policy.kind": ("diffusion", "mlp"),
}


# What lies between a message and the network besides the checkpoint's layout (state fields, cameras, image size,
# crops, action scale, rate) and its weights (the state normaliser): a policy trained with one of these set
# otherwise misreads every frame or state, silently. A run started from a checkpoint (`init_from`) takes them from it.
INPUT_PIPELINE = ("sac.normalize_frames", "env.obs_frame", "env.randomization.delay_compensation")
# What a run started from a checkpoint (`init_from`) defaults to where the command line leaves them, so fine-tuning
# keeps what the sim taught: the starting policy fills the replay buffer before anything is updated (updates from
# the first step took a sim camera policy from 1.00 to 0.04 in 300 env steps), the encoder is held, and the actor
# is anchored at the starting policy (`SACConfig.anchor`): without them the first 100 updates on a drawn cell's few
# hundred frames moved the policy's actions about 4x as far as 100 updates of the sim run on its own data, and the
# success often fell at the first evaluation after updates began (#54; docs/log/benchmarks.md, "Sim to robot").
FINETUNE_DEFAULTS = {"loop.learning_starts": 200, "sac.frozen_encoder": True, "sac.anchor": 0.1}


def input_pipeline(cfg: TrainConfig) -> dict[str, Any]:
    """`INPUT_PIPELINE`'s values in `cfg`."""
    return {key: operator.attrgetter(key)(cfg) for key in INPUT_PIPELINE}


def check_config(cfg: TrainConfig) -> None:
    """Every value and cross-field rule of a run, checked once at load: a mistake fails here in one line naming the
    key (`ConfigError`, exit 2) instead of as a traceback or an empty run minutes later."""
    node = OmegaConf.structured(cfg)
    for key, low in MINIMUM.items():
        if (value := OmegaConf.select(node, key)) < low:
            raise ConfigError(f"bad configuration: {key}={value}: must be >= {low}")
    for key, allowed in CHOICES.items():
        if (value := OmegaConf.select(node, key)) not in allowed:
            raise ConfigError(f"bad configuration: {key}={value}: expected one of {' | '.join(map(str, allowed))}")
    for problem in (_robot_problem(cfg), _algo_problem(cfg), _sim_problem(cfg), _num_envs_problem(cfg)):
        if problem:
            raise ConfigError(f"bad configuration: {problem}")


def _which(can: Callable[[Algorithm], bool]) -> str:
    """The algorithms that can do something, as a message names them: "algo=sac", "algo=sac | residual"."""
    return "algo=" + " | ".join(a.name for a in ALGORITHMS.values() if can(a))


def _algo_problem(cfg: TrainConfig) -> str:
    if not 0.0 <= cfg.sac.augment_gray <= 1.0:
        return f"sac.augment_gray={cfg.sac.augment_gray}: a probability, give one in [0, 1]"
    if cfg.sac.anchor and not cfg.init_from:
        return f"sac.anchor={cfg.sac.anchor} holds the actor near the policy it starts from: give init_from=<run>"
    algo = algorithm(cfg.algo)
    if problem := algo.problem(cfg):
        return problem
    if cfg.init_from and (not algo.init_from or not Path(cfg.init_from).exists()):
        return (f"init_from={cfg.init_from}: " + ("no such run dir or checkpoint folder" if algo.init_from else
                f"starts {_which(lambda a: a.init_from)} runs only (got algo={cfg.algo})"))  # fmt: skip
    if cfg.intervention.enabled and cfg.intervention.device == "simulated" and cfg.robot is None:
        return "intervention.device=simulated watches the sim robot's scene: add robot=sim"
    if cfg.reward.refit_every and (cfg.robot is None or cfg.reward.source != "classifier"
                                   or not (cfg.intervention.enabled and cfg.intervention.device)):  # fmt: skip
        return ("reward.refit_every refits a robot run's classifier on a person's verdicts: it needs robot=<name>, "
                "reward.source=classifier and an intervention.device")  # fmt: skip
    if cfg.intervention.success_from_sim and cfg.intervention.device != "simulated":
        return ("intervention.success_from_sim lets the simulated operator's keys reward: it needs "
                "intervention.device=simulated (a person's keys count with reward.keys)")  # fmt: skip
    return _person_problem(cfg.intervention)


def _person_problem(c: HumanConfig) -> str:
    if c.operator == "person" and c.device != "simulated":
        return ("intervention.operator=person gives the simulated operator a person's limits: it needs "
                "intervention.device=simulated")  # fmt: skip
    for key in ("verdict_error", "miss_rate"):
        if not 0.0 <= (p := getattr(c.person, key)) <= 1.0:
            return f"intervention.person.{key}={p}: a probability, give one in [0, 1]"
    return ""


def _sim_problem(cfg: TrainConfig) -> str:
    if cfg.env.sim in ("gym", "maniskill") and not is_default(cfg.env.randomization):
        return (f"env.randomization applies to the MuJoCo tasks; leave it at its default with sim={cfg.env.sim} "
                "(randomization=none)")  # fmt: skip
    return _for_robot_problem(cfg.env) if cfg.env.for_robot else ""


def _for_robot_problem(env: EnvConfig) -> str:
    """Whether `env.for_robot` names a robot config that loads, for a sim that can stand in for it."""
    where = f"env.for_robot={env.for_robot}"
    if env.sim in ("gym", "maniskill"):
        return f"env.for_robot runs the MuJoCo tasks; sim={env.sim} envs keep their own controllers"
    try:
        robot = load_robot_config(env.for_robot)
    except UnknownRobotError:
        return f"{where}: expected one of {' | '.join(ROBOTS)} or a robot yaml file"
    except (ValueError, OmegaConfBaseException) as e:
        return f"{where}: {' '.join(str(e).split())}"
    if env.obs != "pixels":
        return ""
    if len(robot.joint_names) != SIM_ARM_JOINTS:
        return (f"{where}: a camera run observes the robot's {len(robot.joint_names)} joints, the sim Panda has "
                f"{SIM_ARM_JOINTS}; train obs=state for it, or name a {SIM_ARM_JOINTS}-joint robot")  # fmt: skip
    if missing := [c for c in env.cameras if c not in {cam.name for cam in robot.cameras}]:
        return (f"{where}: env.cameras {missing} are not among its cameras "
                f"({', '.join(c.name for c in robot.cameras) or 'none'})")  # fmt: skip
    return ""


def _num_envs_problem(cfg: TrainConfig) -> str:
    """What the batched actor cannot run: it steps ManiSkill's vector env with the SAC policy and nothing around it."""
    n, loop = cfg.loop.num_envs, f"loop.num_envs={cfg.loop.num_envs}"
    if n == 1:
        return ""
    if cfg.env.sim != "maniskill":
        return f"{loop} batches ManiSkill envs: add sim=maniskill with a ManiSkill task (got sim={cfg.env.sim})"
    if not algorithm(cfg.algo).batched_envs:
        return (f"{loop} trains {_which(lambda a: a.batched_envs)} only: residual and dsrl wrap one env "
                f"(got algo={cfg.algo})")  # fmt: skip
    if cfg.intervention.enabled:
        return f"{loop} has no simulated human (it watches one env): set intervention.enabled=false"
    if cfg.reward.source != "env":
        return f"{loop} takes the env's reward: set reward.source=env (the classifier wraps one env)"
    return ""


def _robot_problem(cfg: TrainConfig) -> str:
    """What a run on a robot (`robot=<name>`) cannot do, saying what to set instead."""
    domains = cfg.distributed.cell_domains
    if cfg.robot is None:
        if cfg.distributed.standins:
            return "distributed.standins=true: stand-ins serve robot cells, which need robot=<name>"
        return f"distributed.cell_domains={domains}: robot cells need robot=<name>" if domains else ""
    if len(set(domains)) != len(domains) or not all(0 <= d <= 232 for d in domains):
        return f"distributed.cell_domains={domains}: distinct ROS domain ids in 0..232, one per cell"
    from robot_rl.real.config import check_robot_config

    where = f"robot={cfg.robot.name}"
    try:
        check_robot_config(cfg.robot)
    except ValueError as e:
        return f"{where}: {e}"
    if not algorithm(cfg.algo).on_robot:
        return f"{where}: only {_which(lambda a: a.on_robot)} trains on a robot so far (got algo={cfg.algo})"
    if cfg.env.obs == "both":
        return f"{where}: obs=both adds the object's pose, which a robot does not measure: use obs=state or pixels"
    if cfg.record and not cfg.record.endswith(".mcap"):
        return f"record={cfg.record}: a session recording is a rosbag2 MCAP file; name it FILE.mcap"
    if cfg.env.for_robot:
        return f"{where}: env.for_robot shapes a sim run for an arm; a robot run steps the arm itself (drop it)"
    if cfg.env.sim not in ("auto", "mujoco") or not is_default(cfg.env.randomization):
        return (f"{where}: env.sim and env.randomization are the simulator's; a robot run steps the arm as it is "
                "(leave them at their defaults)")  # fmt: skip
    if cfg.intervention.enabled and not cfg.intervention.device:
        return (f"{where}: the simulated human needs the simulator's object state; set intervention.device="
                "spacemouse|gamepad|keyboard|simulated (a person, or the simulated operator on the sim robot), or "
                "intervention.enabled=false")  # fmt: skip
    if not cfg.robot.success_topic and cfg.reward.source != "classifier":
        return (f"{where}: the robot config has no success_topic, so nothing says when an episode succeeded: set "
                "reward.source=classifier reward.classifier_path=<file> (it rewards training and judges evaluations; "
                "a person's keys still override it), or name one (robot.success_topic=<topic>, and "
                "robot.success_event=true for a button that publishes only when pressed)")  # fmt: skip
    if cfg.reward.source == "classifier" and not cfg.reward.classifier_path:
        return (f"{where}: reward.source=classifier needs reward.classifier_path: on a robot no simulator labels "
                "frames; label them in `robot-rl collect --label-frames N` and train one with `robot-rl classifier "
                "train`")  # fmt: skip
    return ""


def register_configs() -> None:
    ConfigStore.instance().store(name="train_schema", node=TrainConfig)


def config_keys(cls: type, prefix: str = "") -> dict[str, Any]:
    """Dotted key -> field type of every leaf of a config dataclass."""
    keys: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(f.default_factory if f.default_factory is not dataclasses.MISSING else None):
            keys |= config_keys(f.default_factory, f"{prefix}{f.name}.")
        else:
            keys[prefix + f.name] = f.type
    return keys


def _type_problem(key: str, value: str, kind: Any) -> str | None:
    """Why `value` does not fit a field annotated `kind` (a string under `from __future__ import annotations`)."""
    convert = {"int": int, "float": float}.get(str(kind))
    if convert is not None:
        try:
            convert(value)
        except ValueError:
            return f"{key}={value}: expected {kind}"
    if str(kind) == "bool" and value.lower() not in ("true", "false"):
        return f"{key}={value}: expected true or false"
    return None


def load_config(overrides: list[str]) -> TrainConfig:
    """Composes configs/ + overrides into a typed TrainConfig; a wrong key, group, type or value fails here in one
    line that names it and what would have been valid."""
    import torch
    from hydra import compose, initialize_config_module
    from hydra.errors import HydraException

    register_configs()
    keys = [o for o in overrides if o.startswith("robot.")]
    if keys and not any(o.startswith("robot=") for o in overrides):
        raise ConfigError(f"bad configuration: {keys[0]} sets a key of the robot, but no robot is chosen: add "
                          "robot=<name> (one of configs/robot/, e.g. robot=sim)")  # fmt: skip
    if not any(o.startswith("profile=") for o in overrides):
        overrides = [*overrides, f"profile={'gpu' if torch.cuda.is_available() else 'cpu'}"]
    try:
        with initialize_config_module(config_module="robot_rl.configs", version_base="1.3"):
            cfg = compose(config_name="config", overrides=overrides)
        cfg = OmegaConf.to_object(cfg)
    except (HydraException, OmegaConfBaseException) as e:
        raise ConfigError(_explain(e, overrides, config_keys(TrainConfig))) from None
    check_config(cfg)
    return cfg


def _explain(e: Exception, overrides: list[str], fields: dict[str, Any]) -> str:
    """One line for a composition error: the override at fault and what it should have been."""
    groups = group_options()
    msg = []
    for o in overrides:
        key, _, value = o.partition("=")
        key = key.lstrip("+~")
        if key in groups and value not in groups[key]:
            msg.append(f"{key}={value}: expected one of {', '.join(groups[key])}")
        elif key in fields:
            msg += filter(None, [_type_problem(key, value, fields[key])])
        elif key not in groups:
            close = difflib.get_close_matches(key, list(fields), n=3, cutoff=0.5)
            msg.append(f"unknown key '{key}'" + (f": did you mean {', '.join(close)}?" if close else ""))
    if not msg:
        msg.append(" ".join(str(e).split()))
    return "bad configuration: " + "; ".join(msg) + " (robot-rl train --help lists groups and keys)"


def group_options() -> dict[str, list[str]]:
    """The config groups `train` composes (the `defaults` of configs/config.yaml) and their options."""
    from omegaconf import DictConfig

    import robot_rl.configs

    root = Path(robot_rl.configs.__file__).parent
    defaults = OmegaConf.load(root / "config.yaml").defaults
    groups = [next(iter(d)) for d in defaults if isinstance(d, DictConfig)]
    return {g: sorted(p.stem for p in (root / g).glob("*.yaml")) for g in groups}


def group_defaults() -> dict[str, str]:
    from omegaconf import DictConfig

    import robot_rl.configs

    defaults = OmegaConf.load(Path(robot_rl.configs.__file__).parent / "config.yaml").defaults
    return {k: str(v) for d in defaults if isinstance(d, DictConfig) for k, v in d.items()}
