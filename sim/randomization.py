"""Domain randomisation applied at reset. Everything except the object pose is off by default.

Each range is a multiplicative (lo, hi) scale or a symmetric +-amplitude; (1.0, 1.0) / 0.0 means off.
Values are always re-sampled from the nominal model, so randomisation never drifts across resets.

Mass changes are followed by `mj_setConst`: MuJoCo derives each body's inverse weight from its mass at compile time
and scales contact softness by it. With a stale value the pad/cube contacts were too stiff for the actual cube,
and PickCube grasps blew up (QACC/QVEL warnings, cube velocities of 1e9) in ~25 % of episodes once the cube mass
was off nominal and friction below ~0.9 of nominal.

Geometry edits update what MuJoCo derived from it at compile time: a world-body geom whose frame equals its
body's (`geom_sameframe`) has its pose copied from the body and never reads `geom_pos`, so the table is marked as
having its own frame at every reset (`mj_setConst` recomputes the flag from the positions it sees); a resized object
gets its bounding sphere/box (`geom_rbound`, `geom_aabb`, used by the broad phase), its inertia, the sites on it,
and `mj_setConst` for the inverse weights.

Colour jitter starts from the colour MuJoCo draws: a geom with a material (the table) shows the material's rgba only
while its own rgba is MuJoCo's default grey (0.5, 0.5, 0.5, 1); any other geom rgba replaces the material's. Jittering
the table's default grey drew a grey table in every randomised episode (#27), so the jitter is added to the shown
colour and written as the geom's rgba.

The preset that keeps >= 90 % of nominal success against a shifted robot is `configs/randomization/robust.yaml`
(`robot-rl train randomization=robust`); docs/sim_to_real.md has the settings and the measurements.
"""

from __future__ import annotations

import mujoco
import numpy as np

from robot_rl.sim.config import RandomizationConfig

_DEFAULT_RGBA = np.array([0.5, 0.5, 0.5, 1.0], dtype=np.float32)  # MuJoCo's "use the material" geom rgba


def _shown_rgba(model: mujoco.MjModel) -> np.ndarray:
    """(ngeom, 4) colours as drawn: the material's while the geom's rgba is the default, else the geom's."""
    rgba = model.geom_rgba.copy()
    mat = model.geom_matid
    from_mat = (mat >= 0) & np.all(rgba == _DEFAULT_RGBA, axis=1)
    rgba[from_mat] = model.mat_rgba[mat[from_mat]]
    return rgba


def _active(scale_range: tuple[float, float]) -> bool:
    # Compare by value: OmegaConf hands tuples back as lists.
    return scale_range[0] != 1.0 or scale_range[1] != 1.0


class DomainRandomizer:
    """Holds the nominal model values and writes a fresh sample into the model at each reset."""

    def __init__(
        self,
        cfg: RandomizationConfig,
        model: mujoco.MjModel,
        object_bodies: tuple[str, ...],
        colored_geoms: tuple[str, ...],
        arm_dofs: slice,
        table_geom: str,
    ) -> None:
        self.cfg = cfg
        self.model = model
        self._bodies = np.array([model.body(b).id for b in object_bodies], dtype=int)
        self._geoms = np.array([model.geom(g).id for g in colored_geoms], dtype=int)
        self._arm_dofs = arm_dofs
        self._table = model.geom(table_geom).id
        self._table_pos = model.geom_pos[self._table].copy()
        self._obj_geoms = np.array([g for g in range(model.ngeom) if model.geom_bodyid[g] in self._bodies], dtype=int)
        self._obj_sites = np.array([s for s in range(model.nsite) if model.site_bodyid[s] in self._bodies], dtype=int)
        self._size = model.geom_size.copy()
        self._rbound = model.geom_rbound.copy()
        self._aabb = model.geom_aabb.copy()
        self._geom_pos = model.geom_pos.copy()
        self._site_pos = model.site_pos.copy()
        self._friction = model.geom_friction.copy()
        self._mass = model.body_mass.copy()
        self._inertia = model.body_inertia.copy()
        self._damping = model.dof_damping.copy()
        self._cam_pos = model.cam_pos.copy()
        self._cam_quat = model.cam_quat.copy()
        self._rgba = _shown_rgba(model)  # colour jitter's centre (module docstring)
        self._osc = np.flatnonzero(model.actuator_group == 1)  # the Cartesian impedance actuators (panda.xml)
        self._gain = model.actuator_gainprm[:, 0].copy()
        self._bias = model.actuator_biasprm[:, :3].copy()
        self._scratch: mujoco.MjData | None = None  # for mj_setConst after mass changes
        self.latency = cfg.action_latency  # this episode's action latency in control steps; set by apply()
        self.obs_delay = cfg.obs_delay  # this episode's observation delay in control steps; set by apply()

    def apply(self, rng: np.random.Generator) -> None:
        cfg, m = self.cfg, self.model
        if _active(cfg.friction_scale):
            m.geom_friction[:, 0] = self._friction[:, 0] * rng.uniform(*cfg.friction_scale)
        if cfg.table_height[0] != 0.0 or cfg.table_height[1] != 0.0:
            m.geom_pos[self._table, 2] = self._table_pos[2] + rng.uniform(*cfg.table_height)
        mass_changed = _active(cfg.mass_scale)
        if mass_changed:
            s = rng.uniform(*cfg.mass_scale, size=len(self._bodies))
            m.body_mass[self._bodies] = self._mass[self._bodies] * s
            m.body_inertia[self._bodies] = self._inertia[self._bodies] * s[:, None]
        if _active(cfg.object_size_scale):
            self._resize_objects(rng.uniform(*cfg.object_size_scale), mass_changed)
        if mass_changed or _active(cfg.object_size_scale):
            if self._scratch is None:
                self._scratch = mujoco.MjData(m)
            mujoco.mj_setConst(m, self._scratch)  # inverse weights follow the new masses (module docstring)
        m.geom_sameframe[self._table] = mujoco.mjtSameFrame.mjSAMEFRAME_NONE  # after mj_setConst, which recomputes it
        if _active(cfg.damping_scale):
            dofs = self._damping[self._arm_dofs]
            m.dof_damping[self._arm_dofs] = dofs * rng.uniform(*cfg.damping_scale, size=dofs.shape)
        if cfg.camera_pos_jitter > 0.0:
            noise = rng.uniform(-cfg.camera_pos_jitter, cfg.camera_pos_jitter, size=self._cam_pos.shape)
            m.cam_pos[:] = self._cam_pos + noise
        if cfg.camera_rot_jitter > 0.0:
            for i in range(m.ncam):
                axis = rng.normal(size=3)
                dq = np.zeros(4)
                mujoco.mju_axisAngle2Quat(
                    dq, axis / np.linalg.norm(axis), rng.uniform(-cfg.camera_rot_jitter, cfg.camera_rot_jitter)
                )
                mujoco.mju_mulQuat(m.cam_quat[i], dq, self._cam_quat[i])
        if cfg.color_jitter > 0.0:
            noise = rng.uniform(-cfg.color_jitter, cfg.color_jitter, size=(len(self._geoms), 3))
            rgba = self._rgba[self._geoms].copy()  # keeps the shown alpha (a material's)
            rgba[:, :3] = np.clip(rgba[:, :3] + noise, 0.0, 1.0)
            m.geom_rgba[self._geoms] = rgba
        if _active(cfg.arm_stiffness_scale) or _active(cfg.arm_damping_scale):
            kp, kv, a = rng.uniform(*cfg.arm_stiffness_scale), rng.uniform(*cfg.arm_damping_scale), self._osc
            m.actuator_gainprm[a, 0] = self._gain[a] * kp
            m.actuator_biasprm[a, 1] = self._bias[a, 1] * kp
            m.actuator_biasprm[a, 2] = self._bias[a, 2] * kv
        self.latency = cfg.action_latency
        if cfg.action_latency_max > cfg.action_latency:
            self.latency = int(rng.integers(cfg.action_latency, cfg.action_latency_max + 1))
        self.obs_delay = cfg.obs_delay
        if cfg.obs_delay_max > cfg.obs_delay:
            self.obs_delay = int(rng.integers(cfg.obs_delay, cfg.obs_delay_max + 1))

    def _resize_objects(self, scale: float, mass_changed: bool) -> None:
        """Scales the objects' geoms about their bodies, keeping each body's mass (inertia goes with size^2)."""
        m, g, st = self.model, self._obj_geoms, self._obj_sites
        m.geom_size[g] = self._size[g] * scale
        m.geom_rbound[g] = self._rbound[g] * scale
        m.geom_aabb[g] = self._aabb[g] * scale
        m.geom_pos[g] = self._geom_pos[g] * scale
        m.site_pos[st] = self._site_pos[st] * scale
        inertia = m.body_inertia[self._bodies] if mass_changed else self._inertia[self._bodies]
        m.body_inertia[self._bodies] = inertia * scale**2
