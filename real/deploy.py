"""`robot-rl deploy CHECKPOINT --robot sim|franka|ur5e`: run a trained policy on a robot at a fixed rate.

The checkpoint supplies the weights, the normalisation and the training config, from which the observation
layout, cameras, action scale (`max_step`), control rate and episode length follow, so a robot config only says
where the topics are. Every command goes through the robot env's `SafetyFilter`. With `--teleop`, a human can take
over (the device's intervene toggle) and press the device's failure button as an e-stop; `--record` appends
every episode to a zarr `EpisodeStore` in the same layout as sim demos.

Success is the robot's success topic where its config names one; a real cell has none, and then the classifier
saved with the checkpoint's run judges (ending the episode where it sees success, as in training), else the
person's success key on the `--teleop` device (`pick_success_judge`).
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from robot_rl.algos.reward_classifier import ClassifierReward, RewardClassifier, load_classifier
from robot_rl.demos.teleop import TeleopDevice, to_action
from robot_rl.errors import UserError
from robot_rl.real.config import RobotConfig
from robot_rl.real.robot import ACTION_DIM, RobotEnv, SafetyStop, StaleDataError
from robot_rl.real.timing import frozen_heap, one_inference_thread, percentiles_ms
from robot_rl.types import ObsLayout

if TYPE_CHECKING:
    from robot_rl.checkpoint import Checkpoint

log = logging.getLogger("robot_rl.deploy")
ESTOP_EVENT = "failure"  # the teleop button that doubles as an e-stop during deployment
SUCCESS_EVENT = "success"  # the teleop button that says "done" where nothing else judges success


@dataclass
class EpisodeLog:
    steps: dict[str, list[Any]] = field(default_factory=dict)

    def add(self, row: dict[str, Any]) -> None:
        for k, v in row.items():
            self.steps.setdefault(k, []).append(np.asarray(v))

    def arrays(self) -> dict[str, np.ndarray]:
        return {k: np.stack(v) for k, v in self.steps.items()}


def _status_line(env: RobotEnv, ep: int, t: int, interventions: int, out: Any) -> None:
    r = env.rate.stats()
    lat = env.latencies[-20:]
    out.write(
        f"\rep {ep} step {t:3d} | {1e3 / r['period_mean_ms'] if r['cycles'] else 0:5.1f} Hz"
        f" | misses {r['deadline_misses']} | latency {1e3 * float(np.mean(lat)) if lat else 0:5.1f} ms"
        f" | intervened {interventions} | holds {env.safety.holds}   "
    )
    out.flush()


def pick_success_judge(
    checkpoint: Checkpoint, layout: ObsLayout, robot: RobotConfig, keys: bool
) -> tuple[str, RewardClassifier | None]:
    """(what says an episode succeeded, the classifier if it is one): the robot's success topic; without one the
    classifier saved with the checkpoint's run (`checkpoints/<name>/../../reward_classifier.safetensors`); else the
    person's success key, where there is a teleop device (`keys`)."""
    if robot.success_topic:
        return f"{robot.success_topic} {'button' if robot.success_event else 'topic'}", None
    saved = checkpoint.run_dir / "reward_classifier.safetensors"
    if saved.is_file():
        clf, meta = load_classifier(saved)
        reads = (meta["state_layout"], meta["cameras"])
        if reads != ({k: list(v) for k, v in layout.state.items()}, list(layout.cameras)):
            raise UserError(f"{saved} reads state {reads[0]}, cameras {reads[1]}; the policy observes "
                            f"{layout.to_dict()['state']}, cameras {list(layout.cameras)}")  # fmt: skip
        return f"classifier {saved}", clf
    if keys:
        return "success key", None
    raise UserError(f"robot {robot.name} has no success_topic and {checkpoint.run_dir} saved no reward "
                    "classifier, so nothing says when an episode succeeded: name the robot's success topic "
                    "(--robot-set success_topic=<topic>, plus --robot-set success_event=true for a button), or judge "
                    "with a person's success key (--teleop keyboard|gamepad|spacemouse)")  # fmt: skip


def _episode(judged, env: RobotEnv, policy, device: TeleopDevice | None, judge: str, ep: int, obs: dict,
             status: bool) -> tuple[dict[str, Any], EpisodeLog, dict]:  # fmt: skip
    """Steps one episode from its reset's `obs` until it ends, the person's success key ends it, or the robot stops
    it; returns its summary row, its steps (for `--record`) and the observation it ended on."""
    steps, done, t, n_int, reason, info = EpisodeLog(), False, 0, 0, "", {}
    start = time.monotonic()
    while not done:
        action = policy.select_action(obs, deterministic=True)
        intervened = False
        if device is not None:
            cmd = device.poll(env)
            if ESTOP_EVENT in cmd.events:
                env.estop("teleop e-stop button")
            if judge == "success key" and SUCCESS_EVENT in cmd.events:
                info = {"success": True}  # the person saw the task done: the episode ends here
                break
            if cmd.intervene:
                action, intervened = to_action(cmd, ACTION_DIM), True
        try:
            next_obs, reward, terminated, truncated, info = judged.step(action)
        except (SafetyStop, StaleDataError) as e:
            reason = f"{type(e).__name__}: {e}"
            break
        steps.add({**obs, "action": action, "reward": np.float32(reward), "terminated": terminated,
                   "truncated": truncated, "intervened": intervened})  # fmt: skip
        obs, done, t, n_int = next_obs, terminated or truncated, t + 1, n_int + intervened
        if status:
            _status_line(env, ep, t, n_int, sys.stderr)
    success = bool(info.get("success", False)) and not reason
    held = bool(info.get("safety_failure", False))  # a stop the policy caused: the episode's last step
    row = {"episode": ep, "success": success, "steps": t, "seconds": time.monotonic() - start, "interventions": n_int,
           "aborted": reason, "safety_failure": held}  # fmt: skip
    return row, steps, obs


def deploy(
    checkpoint: Checkpoint,
    robot: RobotConfig,
    episodes: int,
    hz: float | None = None,
    record: Path | None = None,
    device: TeleopDevice | None = None,
    seed: int = 2_000_000,
    status: bool = True,
    bag: Path | None = None,
) -> dict[str, Any]:
    """Runs `episodes` episodes (seeds `seed + i`, as `robot-rl eval` uses) and returns the summary. With a teleop
    `device`, its intervene toggle hands control to the human and its failure button is an e-stop (and its success
    button ends an episode as a success where it is the judge: `pick_success_judge`). `record` appends the
    episodes to a zarr store, `bag` records the whole session's topics to that MCAP file (`real/record.py`)."""
    from robot_rl.envs import make_env
    from robot_rl.loop.adapters import env_policy

    cfg, layout = checkpoint.cfg, checkpoint.layouts["env"]
    if layout.action_dim != ACTION_DIM:
        raise UserError(f"{checkpoint.path}: deployment supports position-only policies (env.yaw=false)")
    if hz is not None and hz != layout.control_hz:
        log.warning("running at %.1f Hz, the policy was trained at %.1f Hz: its steps now take a different time",
                    hz, layout.control_hz)  # fmt: skip
    policy = env_policy(cfg, checkpoint.policy())  # a residual agent runs with its frozen base
    layout = layout.replace(control_hz=hz or layout.control_hz)
    judge, clf = pick_success_judge(checkpoint, layout, robot, device is not None)
    env = make_env(cfg.env, robot=robot, node_name="robot_rl_deploy", layout=layout)
    judged = env if clf is None else ClassifierReward(env, clf)  # what the episodes step; `env` stays the robot
    recorder = None
    if bag is not None:  # before the first reset, so the session's first messages are in it
        from robot_rl.real.record import SessionRecorder

        recorder = SessionRecorder(env.tx, robot, bag)
    store = None
    if record is not None:
        from robot_rl.demos.store import EpisodeStore

        store = EpisodeStore(record, "a")
    results: list[dict[str, Any]] = []
    stopped = ""
    with frozen_heap(), one_inference_thread():
        try:
            for ep in range(episodes):
                try:
                    obs, _ = judged.reset(seed=seed + ep)
                except (SafetyStop, StaleDataError) as e:  # an e-stop still pressed, or a robot that does not answer
                    stopped = f"{type(e).__name__}: {e}"
                    break
                policy.reset()
                if device is not None:
                    device.reset()
                r, steps, obs = _episode(judged, env, policy, device, judge, ep, obs, status)
                results.append(r)
                if status:
                    outcome = "success" if r["success"] else "failure"
                    sys.stderr.write(f"\nepisode {ep}: {outcome} in {r['steps']} steps {r['aborted']}\n")
                if store is not None and r["steps"] > 0:
                    source = "intervention" if r["interventions"] else "policy"
                    store.add_episode(steps.arrays(), meta={"success": r["success"], "length": r["steps"],
                                                          "seed": seed + ep, "source": source, "task": cfg.env.task,
                                                          "robot": robot.name}, final=obs)  # fmt: skip
                if r["aborted"] and env.safety.latched and env.safety.latched.startswith(("estop", "teleop")):
                    stopped = r["aborted"]
                    break
        finally:
            if store is not None:
                store.close()
            if recorder is not None:
                recorder.close()
            env.close()
    ok = [r for r in results if r["success"]]
    lat50, lat99 = percentiles_ms(env.latencies)
    return {
        "checkpoint": str(checkpoint.path),
        "robot": robot.name,
        "episodes": len(results),
        "success_rate": float(np.mean([r["success"] for r in results])) if results else float("nan"),
        "cycle_time_s": float(np.mean([r["seconds"] for r in ok])) if ok else float("nan"),
        "mean_cycle_steps": float(np.mean([r["steps"] for r in ok])) if ok else float("nan"),
        "aborted_episodes": sum(bool(r["aborted"]) for r in results),
        # episodes stopped by the policy's doing (a joint or force limit, the workspace): failures, not aborts
        "safety_failure_rate": float(np.mean([r["safety_failure"] for r in results])) if results else float("nan"),
        "interventions": sum(r["interventions"] for r in results),
        "safety_holds": env.safety.holds,
        "rejected_actions": env.safety.rejected,
        "control": env.rate.stats(),
        "latency_p50_ms": lat50,
        "latency_p99_ms": lat99,
        "stopped": stopped,
        "success_judge": judge,
        **({"recording": str(bag)} if bag is not None else {}),
        "per_episode": results,
    }
