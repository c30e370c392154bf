"""Resets on a robot and episodes that end early: the home move through the safety layer, who resets the scene,
an e-stop mid-episode that ends it without poisoning the replay buffer, a joint limit the policy drives into that
ends it as a safety failure (sim robot in-process, inproc DDS)."""

from __future__ import annotations

import threading
import time

import gymnasium as gym
import numpy as np
import pytest
from real_util import inproc_robot
from test_robot import Served

from robot_rl.buffers import ReplayBuffer
from robot_rl.evaluation import evaluate
from robot_rl.loop.actor import Actor
from robot_rl.real import msgs
from robot_rl.real.config import load_robot_config, proprio_layout
from robot_rl.real.robot import RobotEnv, SafetyStop, envelope_states
from robot_rl.real.safety import FOLLOW_SLACK
from robot_rl.transport import LATCHED_QOS, TransportConfig, make_transport
from robot_rl.types import ObsLayout

pytestmark = pytest.mark.realtime

HOME, BOX = np.array([0.5, 0.0, 0.15]), np.array([0.04, 0.04, 0.02])


def home_robot(scene_reset: str):
    return inproc_robot("reset=home", f"scene_reset={scene_reset}", f"home_box={BOX.tolist()}")


class Recording(RobotEnv):
    """Every command a reset's home move sent, with the measured TCP it was computed from."""

    def command_target(self, pos, gripper_opening, poll=True):
        cmd = super().command_target(pos, gripper_opening, poll)
        state = self.robot_state()
        self.sent.append((state.tcp_pos.copy(), cmd))
        return cmd


def test_home_is_drawn_within_its_box_and_reached_through_the_safety_layer_after_the_scene_reset() -> None:
    robot = home_robot("topic")
    served = Served(robot)
    env = Recording(robot, ObsLayout.from_slices(proprio_layout(robot), control_hz=10.0))
    env.sent = []
    homes = []
    try:
        for seed in range(3):
            obs, _ = env.reset(seed=seed)
            homes.append(obs["state"][env.layout["tcp_pos"]].astype(np.float64))
            for _ in range(3):  # move away, so the next reset has somewhere to come back from
                env.step(np.array([1.0, -1.0, 1.0, 1.0]))
    finally:
        env.close()
        served.close()
    homes = np.array(homes)
    assert (np.abs(homes - HOME) <= BOX + 0.01).all(), homes  # the home move stops within 5 mm; the arm settles
    assert np.ptp(homes, axis=0).max() > 0.01, homes  # each reset draws its own
    assert len(env.sent) >= 6  # the scene reset put the arm at the sim task's start; every reset then moved it
    limit = env.safety.step_limit
    for tcp, cmd in env.sent:
        assert not cmd.hold and np.linalg.norm(cmd.target_pos - tcp) <= limit + 1e-9
        assert (cmd.target_pos >= env.safety.lo).all() and (cmd.target_pos <= env.safety.hi).all()


def test_the_operator_resets_the_scene_after_the_arm_is_home() -> None:
    robot = home_robot("operator")
    served = Served(robot)
    env = RobotEnv(robot, ObsLayout.from_slices(proprio_layout(robot), control_hz=10.0))
    prompts = []
    env.operator_prompt = lambda text: prompts.append((text, env.robot_state().tcp_pos.copy()))
    try:
        env.reset(seed=1)
    finally:
        env.close()
        served.close()
    ((text, tcp),) = prompts
    assert "reset the scene" in text and (np.abs(tcp - HOME) <= BOX + 0.01).all()  # asked once the arm was home


class Pusher:
    """A policy that always pushes +x: an episode only ends by its time limit (or an abort)."""

    def select_action(self, obs, deterministic: bool = False):
        return np.array([1.0, 0.0, 0.0, -1.0], np.float32)

    def reset(self) -> None:
        pass


def test_an_estop_mid_episode_aborts_it_without_a_terminal_transition_or_a_stitched_sequence() -> None:
    robot = inproc_robot()
    served = Served(robot)
    tx = make_transport(TransportConfig(backend="inproc", domain_id=robot.domain_id))
    estop = tx.publisher(robot.estop_topic, msgs.BOOL, LATCHED_QOS)  # as `robot-rl estop press|release` does
    env = RobotEnv(robot, ObsLayout.from_slices(proprio_layout(robot), control_hz=20.0), max_episode_steps=8)
    actor = Actor(env, Pusher(), retry_s=0.1)
    release = threading.Timer(1.0, lambda: estop.publish(msgs.scalar(msgs.BOOL, False)))
    try:
        ts = [actor.step() for _ in range(3)]
        estop.publish(msgs.scalar(msgs.BOOL, True))
        time.sleep(0.1)
        release.start()  # the person releases it a second later; until then the actor retries the reset
        t0 = time.monotonic()
        # the follow watchdog keeps a robot episode's newest FOLLOW_SLACK transitions back until the arm is seen to
        # have followed them: the aborted episode hands those out first, then the new one runs its 8 steps
        ts += [actor.step() for _ in range(8 + FOLLOW_SLACK)]
        waited = time.monotonic() - t0
    finally:
        release.cancel()
        env.close()
        tx.close()
        served.close()
    assert actor.stats.aborted == 1 and actor.stats.episodes == 1 and waited >= 0.8
    first_new = 3 + FOLLOW_SLACK
    assert not any(t.terminated for t in ts[:first_new]) and ts[-1].truncated  # the new episode ran to its limit
    # The aborted episode's last next obs is not the new episode's first obs: the buffer starts a new sequence
    # there instead of stitching the new start onto the old end.
    buf = ReplayBuffer(64)
    for t in ts:
        buf.add(t)
    assert not np.array_equal(ts[first_new - 1].next_obs["state"], ts[first_new].obs["state"])
    assert buf.valid.sum() == len(ts)
    before, first = np.flatnonzero(buf.valid)[first_new - 1 : first_new + 1]
    np.testing.assert_array_equal(buf.obs["state"][before + 1], ts[first_new - 1].next_obs["state"])
    np.testing.assert_array_equal(buf.obs["state"][first], ts[first_new].obs["state"])
    assert first == before + 2  # a fresh frame, not the old next obs overwritten


def test_a_policy_that_drives_a_joint_into_its_margin_ends_the_episode_as_a_safety_failure() -> None:
    """Pushing +x winds joint2 up (about 0.04 rad per 2.5 cm); with its upper limit just past home, the step that
    finds it in the margin holds the arm where it is and comes back terminal, worth the safety reward, instead of
    raising; an evaluation scores the episode as a failure and a safety failure, not run again."""
    robot = inproc_robot()
    robot.safety.joint_upper[1] = 0.3  # home ~0.12 rad, so the margin (0.05) starts ~0.13 rad up
    served = Served(robot)
    env = Recording(robot, ObsLayout.from_slices(proprio_layout(robot), control_hz=20.0), max_episode_steps=40)
    env.sent, steps = [], []
    try:
        env.reset(seed=4)
        while not steps or not (steps[-1][2] or steps[-1][3]):
            steps.append(env.step(Pusher().select_action(None)))
        sent = list(env.sent)
        time.sleep(0.3)  # the arm settles on the hold
        env._poll()
        settled = env.robot_state().joint_pos[1]
        res = evaluate(env, Pusher(), 1, seed=5, retry_s=0.0, reruns=0)
    finally:
        env.close()
        served.close()
    _, reward, terminated, truncated, info = steps[-1]
    assert terminated and not truncated and info["safety_failure"] and reward == robot.safety_reward, info
    assert 1 < len(steps) < 40 and not any("safety_failure" in i for *_, i in steps[:-1])
    assert [cmd.hold for _, cmd in sent] == [False] * (len(steps) - 1) + [True]
    tcp, hold = sent[-1]
    assert hold.reasons[0].startswith("joint_limit: joints [1]")
    np.testing.assert_array_equal(hold.target_pos, tcp)  # held where it was measured, no step further
    assert settled < robot.safety.joint_upper[1]
    assert res.episodes == 1 and res.safety_failure_rate == 1.0 and res.aborted_episodes == 0


class Aborting(gym.Env):
    """A 3-step episode whose very first step is aborted `aborts` times (an e-stop during an evaluation)."""

    observation_space = gym.spaces.Dict({"state": gym.spaces.Box(-1, 1, (1,))})
    action_space = gym.spaces.Box(-1, 1, (4,))

    def __init__(self, aborts: int = 1) -> None:
        self.aborts, self.resets, self.t = aborts, [], 0

    def reset(self, *, seed=None, options=None):
        self.resets.append(seed)
        self.t = 0
        return {"state": np.zeros(1, np.float32)}, {}

    def step(self, action):
        if self.aborts:
            self.aborts -= 1
            raise SafetyStop("estop topic")
        self.t += 1
        return {"state": np.zeros(1, np.float32)}, 1.0, self.t == 3, False, {"success": self.t == 3}


def test_an_evaluation_episode_the_robot_aborts_is_run_again_with_its_seed() -> None:
    env = Aborting()
    res = evaluate(env, Pusher(), 2, seed=10, retry_s=0.0)
    assert env.resets == [10, 10, 11] and res.success_rate == 1.0 and res.mean_length == 3


def test_an_evaluation_episode_aborted_on_every_try_is_given_up_and_reported(capsys) -> None:
    """An episode the robot keeps stopping for reasons not the policy's is run `reruns` more times, then left out of
    the scores and counted; the evaluation goes on with the next episode instead of looping."""
    env = Aborting(aborts=3)
    res = evaluate(env, Pusher(), 2, seed=10, retry_s=0.0, reruns=2)
    assert env.resets == [10, 10, 10, 11] and res.aborted_episodes == 1
    assert res.episodes == 1 and res.success_rate == 1.0 and res.safety_failure_rate == 0.0
    err = capsys.readouterr().err
    assert "gave up on episode 0 (seed 10) after 3 aborted tries, the last by SafetyStop: estop topic" in err


class SafetyTerminal(gym.Env):
    """RobotEnv's answer when the policy drove the arm into a limit at its third step: a terminal safety failure."""

    observation_space = gym.spaces.Dict({"state": gym.spaces.Box(-1, 1, (1,))})
    action_space = gym.spaces.Box(-1, 1, (4,))

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return {"state": np.zeros(1, np.float32)}, {}

    def step(self, action):
        self.t += 1
        failed = self.t == 3
        info = {"success": False, **({"safety_failure": True} if failed else {})}
        return {"state": np.full(1, self.t / 10, np.float32)}, -1.0 if failed else 0.0, failed, False, info


def test_the_actor_stores_a_stop_the_policy_caused_as_a_penalised_terminal_transition() -> None:
    actor = Actor(SafetyTerminal(), Pusher())
    ts = [actor.step() for _ in range(3)]
    assert [(t.reward, t.terminated, t.truncated) for t in ts] == [(0.0, False, False)] * 2 + [(-1.0, True, False)]
    assert actor.stats.episodes == 1 and actor.stats.aborted == 0 and actor.between_episodes


def test_envelope_states_span_the_robot_configs_limits() -> None:
    robot = load_robot_config("ur5e")
    layout, states = proprio_layout(robot), envelope_states(robot, seed=0)
    assert states.shape == (2000, max(s.stop for s in layout.values())) and np.isfinite(states).all()
    tcp = states[:, layout["tcp_pos"]]
    assert (tcp >= robot.safety.workspace_lo).all() and (tcp <= robot.safety.workspace_hi).all()
    assert (np.ptp(tcp, axis=0) > 0.9 * (np.array(robot.safety.workspace_hi) - robot.safety.workspace_lo)).all()
    assert states[:, layout["joint_pos"]].std(0).min() > 1.0  # +-2 pi joints
