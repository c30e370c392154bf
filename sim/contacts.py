"""What the contacts did during an episode: peak contact force, peak end-effector force, deepest penetration.

MuJoCo contact sensors in the task models (`<sensor>` in sim/assets/*.xml) compute these in C at every physics
substep; the env copies `sensordata` after each substep and takes the peaks once per control step, because impacts
last a few milliseconds and a 100 ms control step would miss them.

- contact force: the largest normal force of any single contact (pad on cube, cube on table, peg on block, ...).
- end-effector force: the norm of the net force the world exerts on the gripper (hand and fingers), friction
  included; the squeeze of the two fingers on a held object cancels out. It is low-passed with a 20 ms time constant,
  as a Franka's external-wrench estimate (from joint torque sensors) is: that is what its force reflex, and the env's
  `ee_force_limit`, act on. A rigid contact at a 5 ms step spikes to hundreds of newtons for one substep on any
  touch; the unfiltered spikes still show in the peak contact force.
- penetration: the deepest overlap of the object into the scene (the table, the block), in metres.
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np


@dataclass
class ContactPeaks:
    contact_force: float = 0.0  # N
    ee_force: float = 0.0  # N
    penetration: float = 0.0  # m

    def as_info(self) -> dict[str, float]:
        return {
            "peak_contact_force": self.contact_force,
            "peak_ee_force": self.ee_force,
            "max_penetration": self.penetration,
        }


class ContactMonitor:
    """Peaks of one episode from the model's contact sensors: `reset()` at episode start, `record(d, k)` after
    substep k of a control step, `close_step(n)` after its n substeps."""

    def __init__(self, model: mujoco.MjModel, max_substeps: int, filter_s: float = 0.02) -> None:
        def cols(name: str) -> slice:
            s = model.sensor(name)
            return slice(int(s.adr[0]), int(s.adr[0] + s.dim[0]))

        self._ee = cols("ee_force")
        self._contact = cols("contact_force").start  # the normal component comes first
        names = [model.sensor(i).name for i in range(model.nsensor)]
        self._pen = np.array([cols(n).start for n in names if n.startswith("penetration")], dtype=int)
        self._buf = np.zeros((max_substeps, model.nsensordata))
        # First-order low-pass y_k = y_k-1 + a (x_k - y_k-1) over a control step's substeps, as one matrix product:
        # y = W x + decay y_0 with W[k, j] = a (1 - a)^(k - j) for j <= k and decay[k] = (1 - a)^(k + 1).
        dt = model.opt.timestep
        a = dt / (filter_s + dt)
        k = np.arange(max_substeps)
        self._w = np.tril(a * (1.0 - a) ** (k[:, None] - k[None, :]))
        self._decay = (1.0 - a) ** (k + 1)
        self._ee_filtered = np.zeros(3)
        self.peaks = ContactPeaks()
        self.step_ee_force = 0.0  # N, the largest filtered value of the last control step

    @property
    def ee_force(self) -> np.ndarray:
        """The filtered force the world exerts on the gripper now (N, world frame; the sensor reports the hand's
        force on the world)."""
        return -self._ee_filtered

    def reset(self) -> None:
        self.peaks = ContactPeaks()
        self.step_ee_force = 0.0
        self._ee_filtered[:] = 0.0

    def record(self, d: mujoco.MjData, k: int) -> None:
        self._buf[k] = d.sensordata

    def close_step(self, n: int) -> None:
        b, p = self._buf[:n], self.peaks
        y = self._w[:n, :n] @ b[:, self._ee] + self._decay[:n, None] * self._ee_filtered
        self._ee_filtered = y[-1]
        self.step_ee_force = float(np.sqrt((y**2).sum(1).max()))
        p.ee_force = max(p.ee_force, self.step_ee_force)
        p.contact_force = max(p.contact_force, float(b[:, self._contact].max()))
        p.penetration = max(p.penetration, float(-b[:, self._pen].min()))
