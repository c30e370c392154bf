"""gym-hil's PandaPickCube as a robot_rl task: the privileged state our ScriptedExpert and SimulatedHuman read.

gym-hil (the LeRobot HIL-SERL envs) has no privileged-state API; this reads its MuJoCo sensors (`block_pos`, the
gripper's `2f85/pinch_pos`) and gripper command. Used through `sim=gym_hil` (configs/sim/gym_hil.yaml), which also
maps its observations, 7-D action (rotations unused, delta gripper) and `succeed` flag onto ours.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["PandaPickPrivileged"]

STEP = 0.025  # metres of mocap motion per step at |action| = 1 (configs/sim/gym_hil.yaml action_scale)
LIFT = 0.1  # gym-hil's success: block 10 cm above where it started
GRIP_CLOSE, GRIP_OPEN = 1.0, -1.0


class PandaPickPrivileged:
    def state(self, u: Any) -> dict[str, Any]:
        """`u`: the unwrapped gym-hil PandaPickCubeGymEnv."""
        tcp = u._data.sensor("2f85/pinch_pos").data.copy()
        block = u._data.sensor("block_pos").data.copy()
        closed = u._data.ctrl[u._gripper_ctrl_id] / 255.0 > 0.5
        grasped = bool(closed and np.linalg.norm(block - tcp) < 0.02 and block[2] > u._z_init + 0.005)
        lift_left = max(0.0, u._z_init + LIFT - block[2])
        return {
            "tcp": tcp,
            "object_pos": block,
            "z_init": float(u._z_init),
            "gripper_closed_cmd": bool(closed),
            "grasped": grasped,
            "success": bool(u._is_success()),
            "goal_distance": lift_left if grasped else float(np.linalg.norm(block - tcp)) + LIFT,
            "max_step": STEP,
            "yaw_control": False,
        }

    def goal(self, s: dict[str, Any]) -> tuple[np.ndarray, float]:
        """(TCP goal, gripper): above the block, down open, close, lift; recomputed every step like ours."""
        tcp, block = s["tcp"], s["object_pos"]
        dxy = float(np.linalg.norm(block[:2] - tcp[:2]))
        if s["grasped"] or (s["gripper_closed_cmd"] and dxy < 0.01 and abs(tcp[2] - block[2]) < 0.015):
            return np.array([tcp[0], tcp[1], s["z_init"] + LIFT + 0.05]), GRIP_CLOSE
        if s["gripper_closed_cmd"]:  # closed on nothing: open and back off
            return np.array([tcp[0], tcp[1], block[2] + 0.06]), GRIP_OPEN
        if dxy < 0.008 and abs(tcp[2] - block[2]) < 0.008:
            return block.copy(), GRIP_CLOSE
        if dxy > 0.015:  # line up at altitude first, so the fingers do not sweep the block away
            return np.array([block[0], block[1], max(tcp[2], block[2] + 0.05)]), GRIP_OPEN
        return block.copy(), GRIP_OPEN
