"""Structured configs: every key is typed, so a wrong key or type fails at start-up, not mid-run.

The dataclasses flow straight into constructors (`SAC(cfg.sac, ...)`, `make_env(cfg.env)`); the YAML
files in `configs/` only choose between groups (task, obs, profile).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from robot_rl.algos.dsrl import DSRLConfig
from robot_rl.algos.residual import ResidualConfig
from robot_rl.algos.sac import SACConfig
from robot_rl.policies.chunked import ChunkPolicyConfig
from robot_rl.real.config import RobotConfig
from robot_rl.sim.envs import EnvConfig
from robot_rl.sim.experts import InterventionConfig
from robot_rl.transport.base import TransportConfig


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


@dataclass
class HumanConfig(InterventionConfig):
    """Who acts besides the policy. `device` empty: the simulated human (sim runs: it reads the simulator's state,
    with the trigger / rate settings above); a teleop device (spacemouse | gamepad | keyboard, or `simulated`, an
    operator on the sim robot that follows the same settings) takes over whenever its intervene toggle is on."""

    device: str = ""


@dataclass
class LoopConfig:
    env_steps: int = 8000  # online env-step budget
    learning_starts: int = 0  # with demos in the mix, learning can start at once (RLPD)
    sync_every: int = 1  # env steps between weight pushes from learner to actor
    eval_every: int = 1000  # env steps between evaluations
    # evaluate the untrained policy at env step 0 on the final evaluation's episodes: the baseline, in the same run
    eval_at_start: bool = False
    eval_episodes: int = 20
    final_eval_episodes: int = 50
    stop_at_success: float = 0.95  # end early once a periodic evaluation reaches this (>1 disables)
    max_minutes: float = 0.0  # wall-clock budget for this run, resumes included (0 = none)
    checkpoint_every: int = 2000  # env steps; 0 => only at the end
    buffer_capacity: int = 200_000
    log_every: int = 100  # env steps between tensorboard scalar writes


@dataclass
class DistributedConfig:
    """Actor and learner nodes over ROS 2 (`robot-rl launch | learner | actor`)."""

    n_actors: int = 2  # actor processes `robot-rl launch` starts (and restarts when they die); one per arm on a robot
    publish_every: int = 10  # learner updates between weight broadcasts (and sooner whenever it runs out of data)
    learner_timeout_s: float = 5.0  # waiting this long for weights means the learner is gone
    # continue (act on the last weights) | hold (stop stepping until it returns; always on a robot: the arm holds)
    on_learner_loss: str = "continue"
    control_hz: float = 0.0  # actor loop rate; 0 = as fast as the env steps (sim), 10-50 on a robot

    @property
    def steps_per_version(self) -> int:
        """An actor steps at most this often on one policy version, so all actors together make about what the
        learner consumes between broadcasts: policy lag stays ~publish_every steps however fast the sims run."""
        return max(1, self.publish_every // self.n_actors)

    batch_size: int = 8  # transitions per message
    queue_batches: int = 4  # messages in flight before actors block: bounds policy lag to ~queue x batch steps
    local: bool = True  # launch: all nodes on this machine, DDS discovery on loopback only
    transport: TransportConfig = field(default_factory=TransportConfig)


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
    # torch intra-op threads; 0 => the count a learner-shaped step runs fastest at, measured at start-up (on a
    # shared 2-core box a second thread is as often a loss as a gain; oversubscription was 20x slower)
    threads: int = 0
    run_dir: str = ""  # empty => runs/<task>-<obs>-s<seed>-<time>
    resume: str = ""  # a run directory to continue from its latest checkpoint


# Lowest value that makes sense for each numeric key a person commonly sets; anything below fails at start-up.
MINIMUM = {
    "loop.env_steps": 1,
    "loop.learning_starts": 0,
    "loop.sync_every": 1,
    "loop.eval_every": 0,
    "loop.eval_episodes": 1,
    "loop.final_eval_episodes": 1,
    "loop.max_minutes": 0,
    "loop.checkpoint_every": 0,
    "loop.buffer_capacity": 1,
    "loop.log_every": 1,
    "demos.n_episodes": 0,
    "distributed.n_actors": 1,
    "sac.batch_size": 1,
    "sac.utd": 1,
    "bc.steps": 1,
    "bc.batch_size": 1,
    "seed": 0,
    "threads": 0,
}


def check_values(cfg: TrainConfig) -> None:
    """Out-of-range values fail here, naming the key, instead of producing an empty or broken run."""
    from robot_rl.errors import ConfigError

    node = OmegaConf.structured(cfg)
    for key, low in MINIMUM.items():
        value = OmegaConf.select(node, key)
        if value < low:
            raise ConfigError(f"bad configuration: {key}={value}: must be >= {low}")


def register_configs() -> None:
    ConfigStore.instance().store(name="train_schema", node=TrainConfig)
