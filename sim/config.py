"""The simulator's configs and task table, free of MuJoCo: a robot PC reads a checkpoint's config (and deploys
its policy) without the simulator installed. `sim/envs.py` builds the envs they describe."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from robot_rl.errors import ConfigError

TASKS = ("PickCube", "PegInsert")
OBS_MODES = ("state", "pixels", "both")
ARMS = ("osc", "mocap")
OBS_FRAMES = ("absolute", "relative")
SIMS = ("auto", "mujoco", "maniskill", "gym")
REWARDS = ("sparse", "dense")
EPISODE_STEPS = {"PickCube": 50, "PegInsert": 60}  # a task's default episode length
# Tasks whose gripper holds one command whatever the action says (PegInsert starts with the peg grasped); it is the
# executed command, so `last_actions` shows it too, in the sim env and a robot's RobotEnv alike (why:
# docs/sim_to_real.md, "The held grip").
HELD_GRIP = {"PegInsert": 1.0}
SIM_ARM_JOINTS = 7  # the simulated Panda's: a camera run for a robot observes that many joints


@dataclass
class VisualConfig:
    """What the cameras see, never the physics (`randomization.visual`; sim/randomization.py, VisualRandomizer).
    Drawn per episode at reset, uniform in (lo, hi); image noise is drawn per frame. The defaults are the nominal
    scene. Checked when built, so a bad range fails at load, naming the key."""

    # Lights: a factor on every light (headlight and the scene's top light), the top light's tilt from vertical
    # (rad, random azimuth), +- on each channel of their colour (around `light_tint`, a fixed per-channel factor: a
    # held-out cell's warmer light), how many extra spot lights (at most 2: sim/assets/visual.xml) shine from random
    # directions, and the chance the top light casts shadows.
    light_intensity: tuple[float, float] = (1.0, 1.0)
    light_tilt: tuple[float, float] = (0.0, 0.0)
    light_color: float = 0.0
    light_tint: tuple[float, ...] = ()
    extra_lights: tuple[int, int] = (0, 0)
    shadow_prob: float = 0.0
    # Colours, +- on each RGB channel around a centre: the shown colour, or `*_rgb` when given (a held-out cell's
    # green table). `robot_*` paints the arm's lightest material (the Panda's white shell) and jitters the others.
    # The table and the object each take one of three procedural textures (checker, grain, gradient) with
    # `texture_prob`, tinted with the drawn colour. The table plane is the scene's floor and its whole background.
    # Painting replaces `color_jitter` on the geoms it paints. `object_hue` first turns the object's hue by up to
    # +- that many degrees: a +-0.2 jitter around red teaches "reddish", not "the cube" (a blue cube scored 0/20).
    table_color: float = 0.0
    object_color: float = 0.0
    object_hue: float = 0.0
    robot_color: float = 0.0
    table_rgb: tuple[float, ...] = ()
    object_rgb: tuple[float, ...] = ()
    robot_rgb: tuple[float, ...] = ()
    texture_prob: float = 0.0
    # Cameras, each on its own: moved by a distance (m) and turned by an angle in `camera_turn` (rad), both in
    # random directions, and its vertical field of view changed by `fovy` degrees. A camera placed in the cell moves
    # by `camera_shift` (a bumped tripod: centimetres); one on the arm by `hand_camera_shift` (bolted to the hand, a
    # re-mount moves it by millimetres; what larger moves cost: docs/log/sim_to_real.md). Unlike `camera_pos_jitter`
    # these draw a size, so a held-out cell can sit outside the range.
    camera_shift: tuple[float, float] = (0.0, 0.0)
    hand_camera_shift: tuple[float, float] = (0.0, 0.0)
    camera_turn: tuple[float, float] = (0.0, 0.0)
    fovy: tuple[float, float] = (0.0, 0.0)
    # Visual-only shapes (at most 3) in random colours standing on the table beside the object's start region.
    distractors: tuple[int, int] = (0, 0)
    # The camera pipeline on each frame, in a camera's order: Gaussian blur (sigma in pixels), exposure (a gain),
    # white balance (+- gain per channel, around `white_tint`, a fixed per-channel gain: a held-out camera's own),
    # sensor noise (sigma on 0..255, fresh per frame), and with `jpeg_prob` JPEG at a quality in `jpeg_quality`.
    # Levels are drawn per episode.
    blur_sigma: tuple[float, float] = (0.0, 0.0)
    exposure: tuple[float, float] = (1.0, 1.0)
    white_balance: float = 0.0
    white_tint: tuple[float, ...] = ()
    noise_std: tuple[float, float] = (0.0, 0.0)
    jpeg_prob: float = 0.0
    jpeg_quality: tuple[int, int] = (90, 90)

    def __post_init__(self) -> None:
        # OmegaConf hands tuples back as lists; tuples keep `==` (is_default, nominal) exact.
        for f in fields(self):
            if isinstance(v := getattr(self, f.name), list):
                setattr(self, f.name, tuple(v))
        problems = [f"{k}={list(v)}: expected lo <= hi" for k, v in vars(self).items()
                    if isinstance(v, tuple) and len(v) == 2 and not k.endswith("_rgb") and v[0] > v[1]]  # fmt: skip
        problems += [f"{k}={list(v)}: expected 3 values in [0, 1]" for k, v in vars(self).items()
                     if k.endswith("_rgb") and v and (len(v) != 3 or not all(0.0 <= c <= 1.0 for c in v))]  # fmt: skip
        problems += [f"{k}={list(v)}: expected 3 gains in (0, 2]" for k in ("light_tint", "white_tint")
                     if (v := getattr(self, k)) and (len(v) != 3 or not all(0.0 < g <= 2.0 for g in v))]  # fmt: skip
        problems += [f"{k}={getattr(self, k)}: expected a probability" for k in ("shadow_prob", "texture_prob",
                     "jpeg_prob") if not 0.0 <= getattr(self, k) <= 1.0]  # fmt: skip
        for k, most in (("extra_lights", 2), ("distractors", 3)):
            if not 0 <= getattr(self, k)[0] <= getattr(self, k)[1] <= most:
                problems.append(f"{k}={list(getattr(self, k))}: the model has {most}")
        if not 0.0 <= self.object_hue <= 180.0:
            problems.append(f"object_hue={self.object_hue}: expected degrees in 0 .. 180")
        if not 1 <= self.jpeg_quality[0] <= self.jpeg_quality[1] <= 100:
            problems.append(f"jpeg_quality={list(self.jpeg_quality)}: expected 1 .. 100")
        if problems:
            raise ConfigError("bad configuration: env.randomization.visual." + "; ".join(problems))


@dataclass
class RandomizationConfig:
    # Task randomness: object start position offset (+-x, +-y metres) around the task's nominal spot.
    object_xy_range: tuple[float, float] = (0.08, 0.08)
    # Starts at least this far (metres, the larger of |dx|, |dy|) from the nominal spot: 0 samples the whole box; the
    # transfer suite uses it to start the object only outside the region a policy trained on.
    object_xy_min: float = 0.0
    # Object start yaw +-range (rad); only used when the env has yaw control (otherwise yaw is 0).
    object_yaw_range: float = 0.785
    # Gripper start position jitter (+- metres per axis).
    ee_start_jitter: float = 0.01
    friction_scale: tuple[float, float] = (1.0, 1.0)
    mass_scale: tuple[float, float] = (1.0, 1.0)
    damping_scale: tuple[float, float] = (1.0, 1.0)
    camera_pos_jitter: float = 0.0  # metres
    camera_rot_jitter: float = 0.0  # radians, about a random axis
    color_jitter: float = 0.0  # +- on each RGB channel of the object and the table
    table_height: tuple[float, float] = (0.0, 0.0)  # metres added to the table top (the robot base stays put)
    object_size_scale: tuple[float, float] = (1.0, 1.0)  # the object's extents (mass kept, inertia follows)
    # Arm lag: the impedance controller's stiffness and damping (arm=osc), one factor each per episode.
    arm_stiffness_scale: tuple[float, float] = (1.0, 1.0)
    arm_damping_scale: tuple[float, float] = (1.0, 1.0)
    # Control steps by which the observation lags the physics (camera/state pipeline): `obs_delay` ..
    # `obs_delay_max` per episode (a max below the min means exactly `obs_delay`). `last_actions` are never delayed.
    obs_delay: int = 0
    obs_delay_max: int = 0
    # Metres, Gaussian, per step, on the observed object positions (cube, peg, hole): a tracker's error. The TCP comes
    # from joint encoders and stays exact.
    obs_noise: float = 0.0
    # Control steps between a commanded action and its execution: `action_latency` .. `action_latency_max`,
    # drawn per episode (a max below the min means "exactly action_latency"). The delayed thing is the absolute
    # TCP target made from the TCP the policy saw, as on a robot whose controller gets pose targets late.
    action_latency: int = 0
    action_latency_max: int = 0
    # Adds `last_actions` to the state: the clipped actions of the last `action_history` steps, newest first. A
    # memoryless policy cannot tell a late command from a lost one, nor how far the arm moved since a stale view;
    # next to `tcp_vel` the recent actions show it. Robot deployment (real/robot.py) fills them from what it sent.
    action_history: int = 0
    # A Smith predictor on the view: a state `obs_delay` steps old has its TCP fields advanced by this fraction of
    # the commanded motion since (`robot_rl.types.advance_view`, from `last_actions`, so it needs `action_history` >=
    # the delay). The pipeline knows how late its view is: the sim its queue, a robot its message stamps. 0.6 is about
    # what the impedance arm covers of a commanded step per control period. 0 leaves the view as it is.
    delay_compensation: float = 0.0
    # Adds `ee_force` to the state: the force the world exerts on the hand, low-passed as the force limit sees it
    # (`robot_rl.types.ee_force_feature`), which a Franka or UR driver publishes as a wrench (a robot reads it from
    # `RobotConfig.wrench_topic`). Through the peg a policy feels a jam that its 1.5 mm of clearance and a noisy
    # hole pose hide from the positions (docs/sim_to_real.md).
    observe_force: bool = False
    # Lights, colours, textures, cameras, distractors and the image pipeline (configs/randomization/visual.yaml).
    visual: VisualConfig = field(default_factory=VisualConfig)


def randomization_config(raw: dict[str, Any]) -> RandomizationConfig:
    """A `RandomizationConfig` from plain values (a preset's or a cell's yaml), its `visual` entry included."""
    raw = dict(raw)
    raw["visual"] = VisualConfig(**(raw.get("visual") or {}))
    return RandomizationConfig(**raw)


def nominal(cfg: RandomizationConfig, **shift: Any) -> RandomizationConfig:
    """No randomisation (or only `shift`) for a policy trained with `cfg`: the fields that shape what it observes
    rather than the world it acts in carry over to any evaluation of its checkpoint."""
    return RandomizationConfig(action_history=cfg.action_history, delay_compensation=cfg.delay_compensation,
                               observe_force=cfg.observe_force, **shift)  # fmt: skip


def is_default(cfg: RandomizationConfig) -> bool:
    """Whether `cfg` asks for nothing beyond the task's own randomness (lists and tuples compare alike)."""
    norm = {k: tuple(v) if isinstance(v, list) else v for k, v in vars(cfg).items()}
    return norm == vars(RandomizationConfig())


@dataclass
class InterventionConfig:
    enabled: bool = True
    # away_from_goal: the goal distance grew for `patience` consecutive steps (or the object was dropped);
    # no_progress: it did not shrink for `patience` steps; always: the human drives every step.
    trigger: str = "away_from_goal"
    patience: int = 3
    takeover_steps: int = 10
    max_rate: float = 1.0  # probability of stepping in when triggered, at the start of training
    min_rate: float = 0.0  # ... and after `decay_steps` env steps
    decay_steps: int = 20_000  # linear decay from max_rate to min_rate; 0 keeps max_rate forever
    progress_tol: float = 0.002  # metres of goal-distance change that count as moving
    expert_noise: float = 0.0


TRIGGERS = ("away_from_goal", "no_progress", "always")


@dataclass
class PersonConfig:
    """A person's limits for the simulated operator on the sim robot (`intervention.operator=person`), in robot
    time (seconds of the robot's clock, env steps at the control rate); defaults from the human-factors literature."""

    # Trigger seen -> hands on the device: a choice reaction, ~0.4-0.6 s (Hick 1952; Kosinski 2008's review), more
    # than the ~0.25 s of a simple one. The policy keeps acting meanwhile.
    reaction_s: float = 0.5
    # Scene changed -> success / failure key pressed: a choice reaction plus a look to confirm before committing.
    verdict_delay_s: float = 0.75
    # A verdict (on a change of the scene, or when asked) is the wrong one this often: ~3-6 % of the labels of
    # curated benchmark test sets are wrong (Northcutt et al. 2021).
    verdict_error: float = 0.05
    # A trigger (drift, drop, jam) goes unnoticed this often: misses in sustained monitoring run 10-30 % and grow
    # with time on watch (Mackworth 1948; Warm et al. 2008).
    miss_rate: float = 0.1
    # Per episode, per axis: where the person thinks the scene is (where they stand: parallax, depth), shared by the
    # object and the fixture; ~1 cm in 3-D, a person's error localising a point at arm's length.
    pose_noise_m: float = 0.005
    # Per look, per axis, each object apart: relative alignment (peg over hole) is far finer than absolute
    # position, ~1 mm (vernier acuity).
    pose_jitter_m: float = 0.001


OPERATORS = ("oracle", "person")


@dataclass
class GymConfig:
    module: str = ""  # imported first, to register its ids; "" = the id's namespace if it names a module (gym_hil)
    kwargs: dict[str, Any] = field(default_factory=dict)  # passed to gym.make
    state_keys: list[str] = field(default_factory=list)  # entries concatenated into `state`; [] = all non-images
    cameras: dict[str, str] = field(default_factory=dict)  # our camera name -> image entry; {} = all images
    # Our action -> the env's: env dim i gets action[action_from[i]] * action_scale[i] (index -1: 0).
    # [] = our action is the env's, rescaled from [-1, 1] to its bounds.
    action_from: list[int] = field(default_factory=list)
    action_scale: list[float] = field(default_factory=list)
    success_key: str = "success"  # info key whose truth is success (gym-hil: succeed)
    privileged: str = ""  # `module:Class` giving sim_state() / expert_goal() for demos and the simulated human


@dataclass
class EnvConfig:
    task: str = "PickCube"  # PickCube | PegInsert, a ManiSkill id (PickCube-v1, ...), or any gymnasium id with sim=gym
    sim: str = "auto"  # mujoco | maniskill | gym | auto (by task name: ManiSkill ids end in -v<N>)
    obs: str = "state"  # state | pixels | both  (pixels: cameras + proprio only)
    cameras: tuple[str, ...] = ("front", "wrist")
    image_size: int = 64
    control_hz: float = 10.0
    max_episode_steps: int = 0  # 0 => task default (PickCube 50, PegInsert 60)
    reward: str = "sparse"  # sparse | dense
    yaw: bool = False  # adds a dyaw action dim before the gripper
    terminate_on_success: bool = True
    max_step: float = 0.025  # metres of target motion per step at |action| = 1
    max_yaw_step: float = 0.25  # radians per step at |action| = 1
    # osc: the Panda's joints driven by a Cartesian impedance controller with force and torque limits (a real
    # Franka); mocap: the hand welded to the target, there within ~10 ms whatever it pushes (sim/assets/panda.xml).
    arm: str = "osc"
    # The arm's reflex: an episode in which the world pushes on the gripper harder than this (N, net force, checked
    # at every physics substep) ends there as a safety failure, not a success (a Franka stops on its force
    # thresholds the same way). 0 disables it; the peaks are reported in `info` either way.
    ee_force_limit: float = 50.0
    # What forces cost in the reward (docs/sim_to_real.md, "Forces"). The step that trips `ee_force_limit` is a
    # true terminal (no bootstrapping past it) worth `safety_reward`; every other step short of success pays
    # force_cost * (its peak EE force / ee_force_limit)^2, so the many touches under the limit teach the critic to
    # slow down before contact, not only the rare stops (the expert's <= 15 N grasps pay <= 0.09). A success is 1.
    safety_reward: float = -1.0
    force_cost: float = 1.0
    # relative: positions only relative to the object (its start, the hole), see the module docstring; absolute:
    # the TCP and object positions in the world frame, with which policies learn absolute heights (docs/sim_to_real.md,
    # "The observation frame"). Pixel observations keep `tcp_pos` (there is no object to refer to); ManiSkill and gym
    # envs keep their own layouts.
    obs_frame: str = "relative"
    # The arm this sim run trains for (franka | ur5e | sim | a robot yaml): its safety limits cut every command as
    # that arm's safety layer will (step, speed, acceleration, workspace, rotation, gripper rate: robot_rl/limits.py)
    # at this env's control rate, and with obs=pixels the state is what that robot's cell measures
    # (`robot_rl.types.cell_state`: its proprio, the wrench where it names one) and the cameras take its crops, so
    # the checkpoint runs on that arm unchanged (docs/sim_to_real.md). "": the task workspace and the sim's layout.
    for_robot: str = ""
    randomization: RandomizationConfig = field(default_factory=RandomizationConfig)
    gym: GymConfig = field(default_factory=GymConfig)  # sim=gym: how the foreign env maps onto ours


def task_episode_steps(cfg: EnvConfig) -> int:
    """Episode length of `cfg`'s task without building it (a robot runs the task's length too)."""
    return cfg.max_episode_steps or EPISODE_STEPS.get(cfg.task, 50)
