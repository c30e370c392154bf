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

The visual face (`VisualRandomizer`, `randomization.visual`, preset configs/randomization/visual.yaml) changes only
what the cameras see: lights, colours and textures, camera poses and fields of view, distractors (sim/assets/visual.xml
holds the spare lights, textures and shapes) and the camera pipeline on each rendered frame. It draws from its own
child of the env's generator, so the physics draws and the nominal scene's episodes stay what they were.

The preset that keeps >= 90 % of nominal success against a shifted robot is `configs/randomization/robust.yaml`
(`robot-rl train randomization=robust`); docs/sim_to_real.md has the settings and the measurements.
"""

from __future__ import annotations

import colorsys

import cv2
import mujoco
import numpy as np

from robot_rl.sim.config import RandomizationConfig, VisualConfig

_DEFAULT_RGBA = np.array([0.5, 0.5, 0.5, 1.0], dtype=np.float32)  # MuJoCo's "use the material" geom rgba


def turn_hue(rgb: np.ndarray, degrees: float) -> np.ndarray:
    """`rgb` (0..1) with its hue turned by `degrees`, saturation and value kept."""
    h, s, v = colorsys.rgb_to_hsv(*map(float, rgb))
    return np.array(colorsys.hsv_to_rgb((h + degrees / 360.0) % 1.0, s, v), dtype=np.float32)


def shown_rgba(model: mujoco.MjModel) -> np.ndarray:
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
        self._rgba = shown_rgba(model)  # colour jitter's centre (module docstring)
        self._osc = np.flatnonzero(model.actuator_group == 1)  # the Cartesian impedance actuators (panda.xml)
        self._gain = model.actuator_gainprm[:, 0].copy()
        self._bias = model.actuator_biasprm[:, :3].copy()
        self._scratch: mujoco.MjData | None = None  # for mj_setConst after mass changes
        self.latency = cfg.action_latency  # this episode's action latency in control steps; set by apply()
        self.obs_delay = cfg.obs_delay  # this episode's observation delay in control steps; set by apply()
        self.visual = VisualRandomizer(cfg.visual, model, self._obj_geoms, self._table, self._rgba)

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
        m.cam_pos[:], m.cam_quat[:] = self._cam_pos, self._cam_quat  # the visual face turns cameras further
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
        self.visual.apply(rng)  # after the table height and the colour jitter, which it builds on
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


class VisualRandomizer:
    """Draws the scene's looks at reset and runs the camera pipeline on each frame (`frame`)."""

    def __init__(
        self, cfg: VisualConfig, model: mujoco.MjModel, object_geoms: np.ndarray, table: int, shown: np.ndarray
    ) -> None:
        """`shown`: every geom's nominal colour as drawn (`shown_rgba`)."""
        self.cfg, self.model = cfg, model
        m = model
        self._table, self._objects, self._shown = table, object_geoms, shown
        names = [m.light(i).name for i in range(m.nlight)]
        self._extra = np.array([i for i, n in enumerate(names) if n.startswith("extra")], dtype=int)
        self._lights = np.array([i for i, n in enumerate(names) if not n.startswith("extra")], dtype=int)
        self._distractors = np.array([m.geom(f"distractor{i}").id for i in range(3)], dtype=int)
        mats = [m.material(i).name for i in range(m.nmat)]
        self._table_tex = [i for i, n in enumerate(mats) if n.startswith("vis_table_")]
        self._object_tex = [i for i, n in enumerate(mats) if n.startswith("vis_object_")]
        # The robot's materials: those of the geoms on moving bodies other than the objects.
        moving = (m.body_weldid[m.geom_bodyid] != 0) & ~np.isin(np.arange(m.ngeom), object_geoms)
        robot = sorted({int(i) for i in m.geom_matid[moving] if i >= 0})
        self._robot_mats = np.array(sorted(robot, key=lambda i: -m.mat_rgba[i, :3].sum()), dtype=int)  # lightest first
        self._matid, self._mat_rgba = m.geom_matid.copy(), m.mat_rgba.copy()
        self._geom_pos, self._geom_quat = m.geom_pos.copy(), m.geom_quat.copy()
        self._fovy = m.cam_fovy.copy()
        self._light_dir, self._light_diffuse = m.light_dir.copy(), m.light_diffuse.copy()
        self._light_ambient, self._castshadow = m.light_ambient.copy(), m.light_castshadow.copy()
        hl = m.vis.headlight
        self._head = (hl.ambient.copy(), hl.diffuse.copy())
        # Per-episode camera pipeline: (blur sigma, per-channel gain, noise sigma, JPEG quality or 0); None: off.
        self._pipe: tuple[float, np.ndarray, float, int] | None = None
        self._noise: np.random.Generator | None = None

    def apply(self, rng: np.random.Generator) -> None:
        """Draws from a child of `rng` (`spawn` takes nothing from its stream), so the physics and the object's start
        of an episode seed are the same under any visual setting: the cells of a visual suite stay paired."""
        cfg = self.cfg
        if cfg == VisualConfig():
            return
        rng = rng.spawn(1)[0]
        if (cfg.light_intensity != (1.0, 1.0) or cfg.light_tilt != (0.0, 0.0) or cfg.light_color > 0.0
                or cfg.light_tint):  # fmt: skip
            self._light(rng)
        if cfg.extra_lights[1] > 0:
            self._extra_lights(rng)
        if cfg.shadow_prob > 0.0:
            shadows = rng.random() < cfg.shadow_prob
            self.model.light_castshadow[self._lights] = self._castshadow[self._lights] | shadows
        if (cfg.table_color > 0.0 or cfg.table_rgb or cfg.object_color > 0.0 or cfg.object_rgb or cfg.object_hue
                or cfg.texture_prob):  # fmt: skip
            self._paint_table_and_objects(rng)
        if cfg.robot_color > 0.0 or cfg.robot_rgb:
            self._paint_robot(rng)
        if (cfg.camera_shift != (0.0, 0.0) or cfg.hand_camera_shift != (0.0, 0.0) or cfg.camera_turn != (0.0, 0.0)
                or cfg.fovy != (0.0, 0.0)):  # fmt: skip
            self._cameras(rng)
        if cfg.distractors[1] > 0:
            self._place_distractors(rng)
        if (cfg.blur_sigma[1] > 0.0 or cfg.exposure != (1.0, 1.0) or cfg.white_balance > 0.0 or cfg.white_tint
                or cfg.noise_std[1] > 0.0 or cfg.jpeg_prob > 0.0):  # fmt: skip
            gain = rng.uniform(*cfg.exposure) * rng.uniform(1.0 - cfg.white_balance, 1.0 + cfg.white_balance, 3)
            gain *= np.asarray(cfg.white_tint or (1.0, 1.0, 1.0))
            jpeg = int(rng.integers(cfg.jpeg_quality[0], cfg.jpeg_quality[1] + 1))
            jpeg = jpeg if rng.random() < cfg.jpeg_prob else 0
            self._pipe = (rng.uniform(*cfg.blur_sigma), gain.astype(np.float32), rng.uniform(*cfg.noise_std), jpeg)
            self._noise = np.random.default_rng(rng.integers(2**63))  # per frame, apart from the env's draws

    def frame(self, img: np.ndarray) -> np.ndarray:
        """One rendered uint8 (H, W, 3) RGB frame through this episode's camera pipeline (`img` itself when off)."""
        if self._pipe is None:
            return img
        blur, gain, sigma, jpeg = self._pipe
        x = img.astype(np.float32)
        if blur > 0.0:  # the lens, before the sensor
            x = cv2.GaussianBlur(x, (0, 0), blur)
        x *= gain
        if sigma > 0.0:
            x += sigma * self._noise.standard_normal(x.shape, dtype=np.float32)
        out = np.clip(x + 0.5, 0.0, 255.0).astype(np.uint8)
        if jpeg:  # OpenCV's JPEG is BGR: its colour transform assumes that order
            _, buf = cv2.imencode(".jpg", out[..., ::-1], [cv2.IMWRITE_JPEG_QUALITY, jpeg])
            out = np.ascontiguousarray(cv2.imdecode(buf, cv2.IMREAD_COLOR)[..., ::-1])
        return out

    def _light(self, rng: np.random.Generator) -> None:
        """Brightness, colour and the top light's direction; the headlight follows the brightness and colour."""
        cfg, m, li = self.cfg, self.model, self._lights
        scale = rng.uniform(*cfg.light_intensity) * rng.uniform(1.0 - cfg.light_color, 1.0 + cfg.light_color, 3)
        scale *= np.asarray(cfg.light_tint or (1.0, 1.0, 1.0))
        m.light_diffuse[li] = self._light_diffuse[li] * scale
        m.light_ambient[li] = self._light_ambient[li] * scale
        m.vis.headlight.ambient[:] = self._head[0] * scale
        m.vis.headlight.diffuse[:] = self._head[1] * scale
        tilt, azimuth = rng.uniform(*cfg.light_tilt), rng.uniform(0.0, 2.0 * np.pi)
        for i in li:
            m.light_dir[i] = _turned(self._light_dir[i], tilt, azimuth)

    def _extra_lights(self, rng: np.random.Generator) -> None:
        """0..2 extra directional lights from 20-70 degrees up, any side, each at its own brightness."""
        m, n = self.model, int(rng.integers(self.cfg.extra_lights[0], self.cfg.extra_lights[1] + 1))
        m.light_active[self._extra] = False
        for i in self._extra[:n]:
            up, around = rng.uniform(0.35, 1.2), rng.uniform(0.0, 2.0 * np.pi)
            m.light_dir[i] = -np.array([np.cos(up) * np.cos(around), np.cos(up) * np.sin(around), np.sin(up)])
            m.light_diffuse[i] = rng.uniform(0.2, 0.5) * rng.uniform(0.8, 1.0, 3)
            m.light_active[i] = True

    def _paint_table_and_objects(self, rng: np.random.Generator) -> None:
        """Each geom gets its colour, and with `texture_prob` a textured material (each task has one object geom,
        so no two geoms share one)."""
        cfg, m = self.cfg, self.model
        m.geom_matid[:] = self._matid
        m.mat_rgba[:] = self._mat_rgba
        groups = ((np.array([self._table]), cfg.table_color, 0.0, cfg.table_rgb, self._table_tex),
                  (self._objects, cfg.object_color, cfg.object_hue, cfg.object_rgb, self._object_tex))  # fmt: skip
        for geoms, jitter, hue, centre, textures in groups:
            for g in geoms:
                rgba = self._shown[g].copy()
                if centre:
                    rgba[:3] = centre
                if hue:
                    rgba[:3] = turn_hue(rgba[:3], rng.uniform(-hue, hue))
                rgba[:3] = np.clip(rgba[:3] + rng.uniform(-jitter, jitter, 3), 0.0, 1.0)
                if cfg.texture_prob > 0.0 and rng.random() < cfg.texture_prob:
                    m.geom_matid[g] = textures[int(rng.integers(len(textures)))]
                mat = m.geom_matid[g]
                if mat >= 0:  # a material's colour shows only under MuJoCo's default geom rgba (module docstring)
                    m.mat_rgba[mat], m.geom_rgba[g] = rgba, _DEFAULT_RGBA
                else:
                    m.geom_rgba[g] = rgba

    def _paint_robot(self, rng: np.random.Generator) -> None:
        cfg, m = self.cfg, self.model
        for k, i in enumerate(self._robot_mats):
            rgba = self._mat_rgba[i].copy()
            if k == 0 and cfg.robot_rgb:
                rgba[:3] = cfg.robot_rgb
            m.mat_rgba[i, :3] = np.clip(rgba[:3] + rng.uniform(-cfg.robot_color, cfg.robot_color, 3), 0.0, 1.0)

    def _cameras(self, rng: np.random.Generator) -> None:
        """Each camera moved and turned in random directions by drawn sizes, on top of `camera_*_jitter`: a camera
        on a body (the wrist camera) by `hand_camera_shift`, one fixed in the world by `camera_shift`."""
        cfg, m = self.cfg, self.model
        for i in range(m.ncam):
            step = rng.normal(size=3)
            shift = cfg.hand_camera_shift if m.cam_bodyid[i] else cfg.camera_shift
            m.cam_pos[i] += rng.uniform(*shift) * step / np.linalg.norm(step)
            axis, dq = rng.normal(size=3), np.zeros(4)
            mujoco.mju_axisAngle2Quat(dq, axis / np.linalg.norm(axis), rng.uniform(*cfg.camera_turn))
            mujoco.mju_mulQuat(m.cam_quat[i], dq, m.cam_quat[i].copy())
            m.cam_fovy[i] = self._fovy[i] + rng.uniform(*cfg.fovy)

    def _place_distractors(self, rng: np.random.Generator) -> None:
        """The first n shapes stand on the table 17-30 cm to either side of the object's start (clear of the
        object and PegInsert's block), the rest stay parked inside the robot's base."""
        m, ids = self.model, self._distractors
        m.geom_pos[ids], m.geom_quat[ids] = self._geom_pos[ids], self._geom_quat[ids]
        n = int(rng.integers(self.cfg.distractors[0], self.cfg.distractors[1] + 1))
        top = float(m.geom_pos[self._table, 2])
        for g in ids[:n]:
            side = rng.choice((-1.0, 1.0))
            m.geom_pos[g] = (rng.uniform(0.35, 0.7), side * rng.uniform(0.17, 0.3), top + m.geom_aabb[g, 5])
            yaw = rng.uniform(0.0, np.pi)
            m.geom_quat[g] = (np.cos(0.5 * yaw), 0.0, 0.0, np.sin(0.5 * yaw))
            m.geom_rgba[g, :3] = rng.uniform(0.0, 1.0, 3)


def _turned(direction: np.ndarray, tilt: float, azimuth: float) -> np.ndarray:
    """`direction` tilted by `tilt` rad towards the horizontal direction at `azimuth`."""
    axis = np.cross(direction, (np.cos(azimuth), np.sin(azimuth), 0.0))
    if tilt == 0.0 or np.linalg.norm(axis) < 1e-9:
        return direction.copy()
    q, out = np.zeros(4), np.zeros(3)
    mujoco.mju_axisAngle2Quat(q, axis / np.linalg.norm(axis), tilt)
    mujoco.mju_rotVecQuat(out, direction, q)
    return out
