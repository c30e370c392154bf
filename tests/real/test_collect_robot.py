"""`robot-rl collect --robot sim` against a lockstep sim robot process: episodes recorded through RobotEnv, driven by
the simulated operator with a person's limits (`--operator person`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from real_util import spawn, stop

from robot_rl.demos.store import EpisodeStore

STEPS = 20


def test_collect_on_the_robot_backend_records_stamped_episodes_that_name_the_robot(domain: int, tmp_path: Path) -> None:
    store = tmp_path / "robot_demos"
    sim = spawn("sim-robot", "--lockstep", "--domain", str(domain), "--cameras", "front,wrist")
    try:
        col = spawn("collect", str(store), "--robot", "sim", "--domain", str(domain),
                    "--robot-set", "lockstep=true", "-n", "2", "--teleop", "simulated", "--operator", "person",
                    "--max-steps", str(STEPS), "--no-fsync")  # fmt: skip
        out, err = col.communicate(timeout=120)
        assert col.returncode == 0, err[-3000:]
    finally:
        stop(sim)
    val = spawn("dataset", "validate", str(store))
    vout, verr = val.communicate(timeout=60)
    assert val.returncode == 0, vout + verr[-2000:]
    with EpisodeStore(store) as st:
        assert len(st) == 2
        for i in range(2):
            ep, meta = st.episode(i), st.meta(i)
            assert meta["robot"]["name"] == "sim" and meta["robot"]["lockstep"] is True
            assert meta["robot"]["domain_id"] == domain and meta["env"] is None
            assert meta["device"] == "simulated" and meta["operator"] == "person"
            assert meta["cameras"] == ["front", "wrist"]
            lay = meta["state_layout"]
            assert lay["tcp_minus_cube_start"] == [0, 3] and lay["cube_minus_tcp"] == [10, 13]
            # ... then what a robot run trains on besides: TCP position and yaw, joints, the wrench.
            assert lay["tcp_pos"] == [13, 16] and lay["ee_yaw_sin_cos"] == [16, 18]
            assert lay["joint_pos"] == [18, 25] and lay["joint_vel"] == [25, 32] and lay["ee_force"] == [32, 35]
            n = meta["length"]
            assert 1 <= n <= STEPS and ep["state"].shape == (n, 35) and ep["front"].shape == (n, 64, 64, 3)
            # Per-step stamps: the robot's header stamps, seconds since the episode start, increasing; both camera
            # frames come from the same lockstep advance as the state they are recorded with.
            ts = ep["state_timestamp"]
            assert ts.shape == (n,) and (np.diff(ts) > 0).all() and -5.0 < ts[0] <= 0.0 < ts[-1] < 60.0
            np.testing.assert_array_equal(ep["front_timestamp"], ts)
            np.testing.assert_array_equal(ep["wrist_timestamp"], ts)
            assert (np.diff(ep["timestamp"]) > 0).all()
            # The simulated person reached for the cube from what they saw: the TCP ended nearer to it.
            d = np.linalg.norm(ep["state"][:, 10:13], axis=1)  # cube_minus_tcp
            assert d[-1] < d[0] - 0.02, d.round(3)
            # What the episode cost the arm: its steps at the control rate (lockstep; resets by topic are free)
            assert meta["arm_s"] == round(n / 10.0, 3)
    assert "collected 2 episodes" in out
