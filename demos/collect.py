"""Device-driven episodes -> zarr store: the env they run in, the episode loop, the session (`robot-rl collect`)."""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import gymnasium as gym
import numpy as np

from robot_rl.demos.operator import Operator
from robot_rl.demos.store import EpisodeStore
from robot_rl.demos.teleop import DeviceCommand, TeleopDevice, to_action
from robot_rl.errors import UserError
from robot_rl.types import EpisodeAborted, ObsLayout, stack_fields

TASK_INSTRUCTIONS = {
    "PickCube": "pick up the cube and lift it",
    "PegInsert": "insert the peg into the hole",
}
# Policy acting in an env: obs -> action.
Policy = Callable[[dict[str, np.ndarray]], np.ndarray]


@dataclass
class CollectConfig:
    """What to collect and from which env backend; `backend` is the switch a real arm will plug into."""

    task: str = "PickCube"
    backend: str = "sim"
    obs: str = "both"
    cameras: tuple[str, ...] = ("front", "wrist")
    image_size: int = 64
    max_episode_steps: int = 0
    instruction: str = ""
    success_only: bool = False
    seed: int = 0
    hz: float = 0.0  # pace the loop (human devices); 0 = as fast as possible
    max_attempts_factor: int = 3
    env: Any = None  # the EnvConfig `train` composes (sim, gym mapping, ...); None: a default env of `task`
    robot: str = "sim"  # backend "robot": robot config name or yaml (real/config.py), plus key=value overrides
    robot_overrides: tuple[str, ...] = ()
    control_hz: float = 0.0  # backend "robot": RobotEnv's control rate (0: the robot config's)
    label_frames: int = 0  # > 0: record the operator's success verdict per frame (`run_episode`)


def env_config(cfg: CollectConfig) -> Any:
    """The EnvConfig episodes run in: `cfg.env` (or the task's default) with what collect itself decides."""
    from robot_rl.sim.config import EnvConfig

    return dataclasses.replace(
        cfg.env or EnvConfig(),
        task=cfg.task,
        obs=cfg.obs,
        cameras=tuple(cfg.cameras),
        image_size=cfg.image_size,
        max_episode_steps=cfg.max_episode_steps,
    )


def _plain(env_cfg: Any) -> dict[str, Any]:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.structured(env_cfg))  # type: ignore[return-value]


def _make_sim_env(cfg: CollectConfig) -> gym.Env:
    from robot_rl.envs import make_env

    return make_env(env_config(cfg))


def _make_robot_env(cfg: CollectConfig) -> gym.Env:
    """`RobotEnv` over the robot's ROS 2 topics, observing what the sim task observes (same state layout, cameras),
    so robot episodes and sim episodes train the same policy. The sim env is built only to read that layout."""
    from robot_rl.envs import make_env
    from robot_rl.real.config import load_robot_config, proprio_layout
    from robot_rl.real.robot import STATE_FIELDS

    robot = load_robot_config(cfg.robot, list(cfg.robot_overrides))
    env_cfg = env_config(cfg)
    task_env = make_env(dataclasses.replace(env_cfg, obs="state", cameras=()))
    fields, steps = dict(task_env.unwrapped.state_layout), task_env.unwrapped.max_episode_steps
    task_env.close()
    # The sim task's fields that a cell's topics carry (PickCube's cube pose from the object topic; never the peg's
    # and the hole's, which no topic measures), then what a robot run trains on besides (`proprio_layout`: joint
    # positions and velocities, the wrench); training picks its fields by name.
    sizes = [(name, sl.stop - sl.start) for name, sl in fields.items() if name in STATE_FIELDS]
    sizes += [(name, sl.stop - sl.start) for name, sl in proprio_layout(robot).items() if name not in fields]
    fields = stack_fields(sizes)
    cameras = tuple(cfg.cameras) if cfg.obs in ("pixels", "both") else ()
    hz = cfg.control_hz or robot.control_hz
    size = cfg.image_size if cameras else 0
    layout = ObsLayout.from_slices(fields, cameras=cameras, image_size=size, max_step=env_cfg.max_step, control_hz=hz)
    env_cfg = dataclasses.replace(env_cfg, max_episode_steps=steps)
    return make_env(env_cfg, robot=robot, node_name="robot_rl_collect", layout=layout)


# backend name -> env factory.  A backend's env follows the gym API with dict obs ("state" + uint8 camera
# frames) and info["success"]; it may add info["state_timestamp"] (seconds) and info["camera_timestamps"]
# ({camera: seconds}), wall-clock stamps of the observation's sources (ROS header stamps), stored relative to the
# episode start.
ENV_BACKENDS: dict[str, Callable[[CollectConfig], gym.Env]] = {"sim": _make_sim_env, "robot": _make_robot_env}


def make_collect_env(cfg: CollectConfig) -> gym.Env:
    if cfg.backend not in ENV_BACKENDS:
        raise ValueError(f"unknown env backend {cfg.backend!r}; expected one of {sorted(ENV_BACKENDS)}")
    return ENV_BACKENDS[cfg.backend](cfg)


HUMAN_EPISODE_S = 60.0  # a person needs far longer than a scripted expert: the episode limit for human devices
# Episode buttons that act in `collect` (no policy runs, so there is nothing to intervene on).
COLLECT_BUTTONS = ("gripper", "success", "failure", "rerecord")


@dataclass
class Episode:
    """One recorded episode and its verdict: "keep", "rerecord" (same seed again) or "interrupted" (Ctrl-C)."""

    data: dict[str, np.ndarray]
    final: dict[str, np.ndarray]
    meta: dict[str, Any]
    verdict: str = "keep"

    @property
    def nbytes(self) -> int:
        return sum(v.nbytes for v in self.data.values()) + sum(v.nbytes for v in self.final.values())


def _camera_keys(obs: dict[str, np.ndarray]) -> list[str]:
    return [k for k, v in obs.items() if v.dtype == np.uint8 and v.ndim == 3]


def run_episode(
    env: gym.Env,
    device: TeleopDevice,
    seed: int,
    *,
    task: str,
    instruction: str = "",
    policy: Policy | None = None,
    policy_version: str | None = None,
    hz: float = 0.0,
    operator: Operator | None = None,
    label_frames: int = 0,
) -> Episode:
    """One episode driven by `device` (or by `policy`, with the device's intervene toggle taking over).

    Episode buttons end it early: "success"/"failure" label it (overriding the env's success flag),
    "rerecord" marks it for the same seed again. With an `operator`, each step updates the live readout and
    Ctrl-C ends the episode with verdict "interrupted".

    `label_frames > 0` records frames for a success classifier: each row gets `label`, the person's verdict on
    that row's observation (on from the step the success key is pressed, off again from the failure key), and the
    success key no longer ends the episode: it goes on `label_frames` steps so the success state is seen from
    several poses. The person, not the env, decides when it is over (the env's own success ending is ignored; a
    safety terminal, the arm driven out of its limits, ends it: the arm is held from there).
    """
    device.reset()
    action_dim = int(env.action_space.shape[0])
    limit = getattr(env.unwrapped, "max_episode_steps", 0)
    label, hold_left = False, None
    obs, info = env.reset(seed=seed)
    t0, t0_wall = time.monotonic(), time.time()
    steps: dict[str, list] = {}
    cams = _camera_keys(obs)
    cam_ts = _camera_times(info, cams, 0.0, t0_wall)
    state_ts = info.get("state_timestamp")
    ret, done, verdict, verdict_key = 0.0, False, "keep", None
    success = bool(info.get("success", False))
    while not done:
        tick = time.monotonic()
        stamp = tick - t0
        cmd = device.poll(env)
        if label_frames and {"success", "failure"} & cmd.events:
            label = "success" in cmd.events
            hold_left = label_frames if label and hold_left is None else hold_left
        if policy is not None and not cmd.intervene:
            action, intervened = np.asarray(policy(obs), np.float32), False
        else:
            action, intervened = to_action(cmd, action_dim), policy is not None
        next_obs, reward, terminated, truncated, info = env.step(action)
        success = bool(info.get("success", False))
        row = {
            **obs,
            "action": action,
            "reward": np.float32(reward),
            "terminated": bool(terminated),
            "truncated": bool(truncated),
            "intervened": intervened,
            "success": success,
            "timestamp": np.float64(stamp),
            **{f"{c}_timestamp": np.float64(cam_ts[c]) for c in cams},
            **({"state_timestamp": np.float64(state_ts - t0_wall)} if state_ts is not None else {}),
            **({"label": label} if label_frames else {}),
        }
        for k, v in row.items():
            steps.setdefault(k, []).append(v)
        ret += float(reward)
        obs = next_obs
        cam_ts = _camera_times(info, cams, time.monotonic() - t0, t0_wall)
        state_ts = info.get("state_timestamp")
        done = terminated or truncated
        if label_frames:  # the env's success ending is the person's to judge; a safety terminal still ends it
            hold_left = None if hold_left is None else hold_left - 1
            failed = terminated and not success
            done = failed or truncated or hold_left == 0 or bool(limit and len(steps["action"]) >= limit)
        if operator is not None:
            operator.readout(readout_line(env, len(steps["action"]), obs, cmd, success))
            if operator.stop_requested:
                done, verdict = True, "interrupted"
        for event in ("rerecord",) if label_frames else ("rerecord", "failure", "success"):
            if event in cmd.events:
                done, verdict_key = True, event
                verdict = "rerecord" if event == "rerecord" else verdict
                break
        if hz > 0 and not done:
            time.sleep(max(0.0, 1.0 / hz - (time.monotonic() - tick)))
    data = {k: np.stack([np.asarray(x) for x in v]) for k, v in steps.items()}
    n_interv = int(data["intervened"].sum())
    if policy is None:
        source = device.source
    else:
        source = "intervention" if n_interv else "policy"
    if verdict_key in ("success", "failure"):
        success = verdict_key == "success"
    if label_frames:
        success = bool(data["label"].any())
    meta = {
        "success": success,
        "success_label": "operator" if verdict_key in ("success", "failure") or label_frames else "env",
        "return": ret,
        "length": len(data["action"]),
        "seed": seed,
        "source": source,
        "task": task,
        "instruction": instruction,
        "device": device.name,
        **({"operator": device.operator} if hasattr(device, "operator") else {}),
        "intervened_steps": n_interv,
        "policy_version": policy_version if policy is not None else None,
        "cameras": cams,
        # Field name -> [start, stop) of obs["state"], so plots and tools can name state columns.
        "state_layout": {k: [s.start, s.stop] for k, s in getattr(env.unwrapped, "state_layout", {}).items()},
        "wall_time": time.time(),
    }
    return Episode(data, dict(obs), meta, verdict)


def readout_line(env: gym.Env, step: int, obs: dict[str, np.ndarray], cmd: DeviceCommand, success: bool) -> str:
    """What a person driving needs at a glance: step of limit, TCP position, gripper, success so far."""
    limit = getattr(env.spec, "max_episode_steps", None) or getattr(env.unwrapped, "max_episode_steps", "?")
    parts = [f"step {step:>4}/{limit}"]
    layout = getattr(env.unwrapped, "state_layout", {})
    # The TCP in whatever frame the state holds it (the relative frame has no absolute position).
    for field, frame in (("tcp_pos", ""), ("tcp_minus_cube_start", " from the cube's start"),
                         ("tcp_minus_hole_top", " from the hole")):  # fmt: skip
        if field in layout:
            x, y, z = obs["state"][layout[field]]
            parts.append(f"tcp {x:+.3f} {y:+.3f} {z:+.3f} m{frame}")
            break
    if "gripper_opening" in layout:
        parts.append(f"gripper {float(obs['state'][layout['gripper_opening']][0]):.2f} open")
    parts.append("cmd close" if cmd.gripper > 0 else "cmd open")
    parts.append("SUCCESS" if success else "")
    return "  ".join(parts)


def _camera_times(info: dict[str, Any], cams: list[str], default: float, t0_wall: float) -> dict[str, float]:
    """Seconds since the episode start: the backend's wall-clock frame stamps, or `default` (the loop's time)."""
    given = info.get("camera_timestamps") or {}
    return {c: float(given[c]) - t0_wall if c in given else default for c in cams}


@dataclass
class CollectStats:
    kept: int = 0
    attempts: int = 0
    successes: int = 0
    discarded: int = 0
    steps: int = 0
    bytes_written: int = 0
    write_s: float = 0.0
    elapsed_s: float = 0.0

    def line(self, target: int) -> str:
        sps = self.steps / max(self.elapsed_s, 1e-9)
        mbs = self.bytes_written / 1e6 / max(self.write_s, 1e-9)
        return (
            f"episodes {self.kept}/{target}  successes {self.successes}  attempts {self.attempts}  "
            f"discarded {self.discarded}  {sps:.0f} steps/s  write {mbs:.1f} MB/s"
        )


def collect_to_store(
    cfg: CollectConfig,
    device: TeleopDevice,
    store: EpisodeStore,
    n_episodes: int,
    *,
    env: gym.Env | None = None,
    policy: Policy | None = None,
    policy_version: str | None = None,
    progress: TextIO | None = None,
    operator: Operator | None = None,
) -> CollectStats:
    """Fill `store` up to `n_episodes` episodes (episodes already there count: this is how resume works).

    Seeds continue after the largest seed already stored, so a resumed run never repeats an episode.
    Each kept episode is committed on its own, so a crash loses at most the episode in flight. With an
    `operator` (a person at the terminal) each episode waits at a start gate and ends with the person's keep /
    discard / re-record verdict; Ctrl-C stops the episode in flight, asks whether to keep it, and ends the session.
    """
    own_env = env is None
    env = make_collect_env(cfg) if env is None else env
    # How to build this env again (replay --reexecute): the sim env's config, not the name of a task.
    env_record = _plain(env_config(cfg)) if cfg.backend == "sim" else None
    # On a robot: which robot (its whole config: name, topics, rates, limits); the observation layout is in
    # `state_layout` and `cameras` as for every episode.
    robot_record = _plain(env.unwrapped.cfg) if cfg.backend == "robot" else None
    instruction = cfg.instruction or TASK_INSTRUCTIONS.get(cfg.task, cfg.task)
    seeds = [store.meta(i).get("seed") for i in range(len(store))]
    seed = max([cfg.seed - 1, *(s for s in seeds if isinstance(s, int))]) + 1
    stats = CollectStats(kept=len(store), successes=sum(bool(store.meta(i).get("success")) for i in range(len(store))))
    budget = cfg.max_attempts_factor * max(0, n_episodes - len(store))
    start = time.monotonic()
    arm = ArmTime(env)
    try:
        while stats.kept < n_episodes:
            if operator is None and stats.attempts >= budget:
                raise RuntimeError(f"only {stats.kept}/{n_episodes} episodes kept after {stats.attempts} attempts")
            if operator is not None:
                gate = f"episode {stats.kept + 1}/{n_episodes} (seed {seed}): [enter] start  [q] quit"
                if operator.ask(gate, {"enter": "start", " ": "start", "q": "quit"}) == "quit":
                    break
            try:
                ep = run_episode(env, device, seed, task=cfg.task, instruction=instruction, policy=policy,
                                 policy_version=policy_version, hz=cfg.hz, operator=operator,
                                 label_frames=cfg.label_frames)  # fmt: skip
            except EpisodeAborted as e:  # a late stream, an e-stop, a hold: this take is lost, the session goes on
                stats.attempts += 1
                stats.discarded += 1
                print(f"\nepisode aborted ({type(e).__name__}: {e}); recording seed {seed} again", file=sys.stderr)
                continue
            stats.attempts += 1
            stats.steps += ep.meta["length"]
            last = ep.verdict == "interrupted"
            if operator is not None and ep.verdict != "rerecord":
                ep.verdict = _ask_verdict(operator, ep)
            if ep.verdict == "rerecord":
                stats.discarded += 1
                continue  # same seed again
            seed += 1
            if ep.verdict in ("discard", "quit") or (cfg.success_only and not ep.meta["success"]):
                stats.discarded += 1
                if last or ep.verdict == "quit":
                    break
                continue
            t = time.monotonic()
            meta = {**ep.meta, "env": env_record, **({"robot": robot_record} if robot_record else {}), **arm.since()}
            store.add_episode(ep.data, meta=meta, final=ep.final)
            stats.write_s += time.monotonic() - t
            stats.bytes_written += ep.nbytes
            stats.kept += 1
            stats.successes += int(ep.meta["success"])
            stats.elapsed_s = time.monotonic() - start
            if progress is not None:
                progress.write("\r" + stats.line(n_episodes))
                progress.flush()
            if last:
                break
    finally:
        stats.elapsed_s = time.monotonic() - start
        if progress is not None:
            progress.write("\n")
        if own_env:
            env.close()
    return stats


class ArmTime:
    """On a robot, each kept episode's meta takes `arm_s`: the arm time (`real.timing.ArmClock`) since the last kept
    one, its discarded and aborted takes and resets included, so a store's sum is what collecting it cost the arm
    (a robot run counts it: `loop.cells.demo_arm_s`)."""

    def __init__(self, env: gym.Env) -> None:
        self.clock = getattr(env.unwrapped, "clock", None)
        if self.clock is not None:
            self.clock.activity = "demos"
        self._mark = self._total()

    def _total(self) -> float:
        return sum(self.clock.seconds.values()) if self.clock is not None else 0.0

    def since(self) -> dict[str, float]:
        if self.clock is None:
            return {}
        total = self._total()
        arm_s, self._mark = total - self._mark, total
        return {"arm_s": round(arm_s, 3)}


def _ask_verdict(operator: Operator, ep: Episode) -> str:
    """keep | discard | rerecord | quit, from the person; after Ctrl-C only keep or discard (then the session ends)."""
    what = f"{ep.meta['length']} steps, {'success' if ep.meta['success'] else 'no success'}"
    if ep.verdict == "interrupted":
        ep.meta["interrupted"] = True
        return operator.ask(f"stopped at ({what}): [k] keep  [d] discard", {"k": "keep", "d": "discard"})
    keys = {"k": "keep", "d": "discard", "r": "rerecord"}
    return operator.ask(f"episode done ({what}): [k] keep  [d] discard  [r] re-record (same seed)", keys)


def collect(
    cfg: CollectConfig,
    store_path: Path,
    n_episodes: int,
    *,
    device_name: str = "scripted",
    noise: float = 0.0,
    wander: int = 0,
    person: Any = None,
    resume: bool = False,
    fsync: bool = True,
) -> CollectStats:
    """`robot-rl collect`: episodes driven by `device_name` into the store at `store_path` (created, or extended
    with `resume`) until it holds `n_episodes`; a person at the terminal starts and judges each episode. `person`:
    the simulated operator's limits (a `PersonConfig`: it drives and labels as a person would; None: an oracle)."""
    import contextlib

    from robot_rl.demos.teleop import UNATTENDED, make_device

    if (store_path / "commit.json").exists() and not resume:
        raise UserError(f"{store_path} already exists; pass --resume to add to it")
    human = device_name not in UNATTENDED
    with contextlib.ExitStack() as session:
        eyes = None
        if device_name == "simulated":  # it watches the sim robot's scene on its own node, apart from the env
            if cfg.backend != "robot":
                raise UserError("--teleop simulated drives the sim robot: add --robot sim")
            from robot_rl.real.config import load_robot_config
            from robot_rl.real.scene import SceneWatcher

            robot = load_robot_config(cfg.robot, list(cfg.robot_overrides))
            eyes = SceneWatcher(robot, fixture=cfg.task == "PegInsert")  # an insertion: where the hole is
        # a missing device fails first
        device = make_device(device_name, seed=cfg.seed, noise_std=noise, eyes=eyes, wander=wander, person=person)
        session.callback(device.close)
        operator = session.enter_context(Operator()) if human else None
        if device_name == "keyboard":
            from robot_rl.demos.teleop.keyboard import key_help

            print(key_help(COLLECT_BUTTONS) + "  Ctrl-C stop", file=sys.stderr)
        store = session.enter_context(EpisodeStore(store_path, "a", fsync=fsync))
        return collect_to_store(cfg, device, store, n_episodes, progress=sys.stderr, operator=operator)
