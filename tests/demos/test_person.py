"""The simulated operator with a person's limits (`intervention.operator=person`) against the oracle, on scripted
scenes (`operator_util`): reaction time, late and wrong verdicts, missed triggers, estimated poses; and the oracle
exactly as it was."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from operator_util import HOLE, HZ, Scene, as_rows, drifting, random_walk, replay

from robot_rl.demos.teleop.person import PersonEyes
from robot_rl.demos.teleop.simulated import PEG_HALF_LENGTH, SimulatedOperator
from robot_rl.loop.human import DeviceIntervener
from robot_rl.real.scene import Sight
from robot_rl.sim.config import InterventionConfig, PersonConfig
from robot_rl.sim.envs import PEG_BELOW_TCP

FIXTURES = Path(__file__).parent / "fixtures"
EXACT = dict(pose_noise_m=0.0, pose_jitter_m=0.0, verdict_error=0.0, miss_rate=0.0)  # one limit at a time


def _first_takeover(op: SimulatedOperator, scene: Scene) -> int:
    return next(i for i, c in enumerate(replay(op, scene, episode=len(scene.frames))) if c.intervene)


def test_the_oracle_gives_the_commands_it_gave_before_the_person_existed() -> None:
    """Replays `fixtures/make_oracle_commands.py`'s trajectories: every twist, grip, toggle and key as recorded."""
    import sys

    sys.path.insert(0, str(FIXTURES))
    from make_oracle_commands import record

    assert record() == json.loads((FIXTURES / "oracle_commands.json").read_text())


def test_a_person_takes_over_reaction_s_after_the_oracle() -> None:
    """Same drift away from the cube: the oracle steps in when triggered, the person 0.5 s (5 steps at 10 Hz) later,
    the policy acting meanwhile."""
    cfg = InterventionConfig(trigger="away_from_goal", patience=3, decay_steps=0)
    oracle = _first_takeover(SimulatedOperator(scene := drifting(30), cfg, seed=0), scene)
    person = SimulatedOperator(scene := drifting(30), cfg, seed=0, person=PersonConfig(reaction_s=0.5, **EXACT))
    assert _first_takeover(person, scene) == oracle + round(0.5 * HZ)


def test_a_person_notices_about_one_minus_miss_rate_of_the_triggers() -> None:
    cfg = InterventionConfig(takeover_steps=1, decay_steps=0)
    op = SimulatedOperator(None, cfg, seed=3, person=PersonConfig(reaction_s=0.0, miss_rate=0.3))
    op._watch(0.05, True, False)  # the baseline
    noticed = np.mean([op._watch(0.05, True, False, jammed=True, now=t) for t in range(4000)])
    assert abs(noticed - 0.7) < 0.03  # 4 sigma of 4000 draws


def test_the_success_key_comes_verdict_delay_s_late() -> None:
    scene = drifting(30, success_at=10, away=0.0)
    keyed = [i for i, c in enumerate(replay(SimulatedOperator(scene, None, 0), scene, 30)) if "success" in c.events]
    op = SimulatedOperator(scene, None, 0, person=PersonConfig(verdict_delay_s=0.8, **EXACT))
    late = [i for i, c in enumerate(replay(op, scene, 30)) if "success" in c.events]
    assert keyed == [10] and late == [18]


@pytest.mark.parametrize("change", ["came", "went"])
def test_about_verdict_error_of_the_verdicts_are_wrong(change: str) -> None:
    """A success that came missed, or one that went (the cube fell) still called a success, per episode."""
    eyes = PersonEyes(Scene([]), PersonConfig(verdict_error=0.2, verdict_delay_s=0.0), np.random.default_rng(0))
    wrong = 0
    for _ in range(3000):
        eyes.reset()
        flags = [False, True] if change == "came" else [False, True, True, False]
        judged = [eyes._judge(f, t) for t, f in enumerate(flags)]
        wrong += judged[-1] != flags[-1]
    assert abs(wrong / 3000 - 0.2) < 0.03  # 4 sigma; a verdict judges the scene, whatever the one before said


def test_asked_about_a_held_scene_a_person_answers_at_once_and_sometimes_wrongly() -> None:
    """A classifier's claimed success on a scene that is no success: the person says "done" about verdict_error of
    the time; on a real success, unseen yet (its key not due), they say so at once. `DeviceIntervener.judge` asks
    (as a classifier's refits do); the oracle only ever says what the scene is."""
    scene = drifting(3, away=0.0)
    person = DeviceIntervener(SimulatedOperator(scene, None, seed=5, person=PersonConfig(verdict_error=0.1)))
    oracle = DeviceIntervener(SimulatedOperator(scene, None, seed=5))
    said = []
    for _ in range(3000):
        person.reset()
        oracle.reset()
        said.append(person.judge(scene))
        assert not oracle.judge(scene)
    assert abs(np.mean(said) - 0.1) < 0.022  # 4 sigma
    scene = drifting(3, success_at=1, away=0.0)
    person = DeviceIntervener(SimulatedOperator(scene, None, 0, person=PersonConfig(**EXACT)))
    scene.i = 1
    assert person(scene, np.zeros(4))[1] is False and person.verdict is None  # verdict_delay_s not passed
    assert person.judge(scene)


def test_a_person_estimates_poses_within_pose_noise_m_and_sees_jams_from_them() -> None:
    """Object and hole off by a bias per episode shared by both, plus a per-look jitter: errors of ~pose_noise_m
    per axis, the peg's error relative to the hole ~jitter. A peg 2.5 mm off the hole's centre on the block is no jam
    to the oracle (3 mm), sometimes one to a person: the jam test reads the estimates."""
    cfg = PersonConfig(pose_noise_m=0.01, pose_jitter_m=0.001)
    bottom = HOLE + [0.0025, 0.0, 0.0005]
    peg = bottom + [0.0, 0.0, PEG_HALF_LENGTH]
    scene = Scene([])
    scene.look = lambda stamp: Sight(peg, False, fixture_pos=HOLE)
    eyes = PersonEyes(scene, cfg, np.random.default_rng(1))
    errors, relative, jams = [], [], []
    for _ in range(2000):
        eyes.reset()
        sight = eyes.look(0.0)
        errors.append(sight.object_pos - peg)
        relative.append((sight.object_pos - peg) - (sight.fixture_pos - HOLE))
        jams.append(SimulatedOperator._peg_state(peg + [0.0, 0.0, PEG_BELOW_TCP], sight)["jammed"])
    assert np.allclose(np.std(errors, axis=0), np.hypot(0.01, 0.001), rtol=0.1)
    assert np.allclose(np.std(relative, axis=0), np.sqrt(2) * 0.001, rtol=0.1)
    assert not SimulatedOperator._peg_state(peg + [0.0, 0.0, PEG_BELOW_TCP], scene.look(0.0))["jammed"]
    assert 0.05 < np.mean(jams) < 0.95


def test_a_person_is_reproducible_from_its_seed() -> None:
    person = PersonConfig(verdict_error=0.2, miss_rate=0.2)
    cfg = InterventionConfig(trigger="no_progress", patience=3, takeover_steps=4, decay_steps=0)

    def run(seed: int) -> list:
        scene = random_walk("PegInsert", 100, 12)
        return as_rows(replay(SimulatedOperator(scene, cfg, seed, person=person), scene))

    assert run(0) == run(0) != run(1)
