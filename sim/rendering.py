"""Headless offscreen rendering of named cameras.

The GL context is created here from the backend named by `MUJOCO_GL` (default EGL, which also works
without a GPU through Mesa llvmpipe; OSMesa when no libEGL is installed). Owning the context instead
of using `mujoco.Renderer` means rendering works even if something imported `mujoco` before this
module, when mujoco's own backend choice may already be fixed to GLFW (which needs a display).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable

import mujoco
import numpy as np

_BACKENDS = ("egl", "osmesa")


def _gl_context(width: int, height: int) -> object:
    """A current offscreen GL context: the configured backend first, then the other headless one."""
    wanted = os.environ["MUJOCO_GL"].lower()
    order = [wanted] + [b for b in _BACKENDS if b != wanted] if wanted in _BACKENDS else list(_BACKENDS)
    errors = []
    for backend in order:
        try:
            ctx = importlib.import_module(f"mujoco.{backend}").GLContext(width, height)
            ctx.make_current()
            return ctx
        except Exception as err:  # noqa: BLE001  (backends fail with ImportError, GLError, OSError, ...)
            errors.append(f"{backend}: {err!r}")
    raise RuntimeError("no headless OpenGL backend works here; tried " + "; ".join(errors))


class CameraRenderer:
    """Renders a fixed set of model cameras at one square size into fresh uint8 (H, W, 3) arrays; `process`, when
    given, takes each fresh frame and returns what the camera delivers (the visual randomisation's pipeline)."""

    def __init__(
        self,
        model: mujoco.MjModel,
        cameras: tuple[str, ...],
        size: int,
        process: Callable[[np.ndarray], np.ndarray] | None = None,
    ) -> None:
        self._cam_ids = []
        for cam in cameras:
            cam_id = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, cam)
            if cam_id < 0:
                raise ValueError(f"camera {cam!r} not in model")
            self._cam_ids.append(cam_id)
        if size > min(model.vis.global_.offwidth, model.vis.global_.offheight):
            raise ValueError(f"image_size {size} exceeds the model's offscreen buffer")
        self.cameras = cameras
        self.model = model
        self._process = process
        self._ctx: object | None = None
        self._ctx = _gl_context(size, size)
        self._mjr = mujoco.MjrContext(model, mujoco.mjtFontScale.mjFONTSCALE_100)
        mujoco.mjr_setBuffer(mujoco.mjtFramebuffer.mjFB_OFFSCREEN, self._mjr)
        self._scene = mujoco.MjvScene(model, maxgeom=1000)
        self._opt = mujoco.MjvOption()
        self._cam = mujoco.MjvCamera()
        self._cam.type = mujoco.mjtCamera.mjCAMERA_FIXED
        self._rect = mujoco.MjrRect(0, 0, size, size)
        self._buf = np.empty((size, size, 3), dtype=np.uint8)

    def render(self, data: mujoco.MjData) -> dict[str, np.ndarray]:
        self._ctx.make_current()  # several envs (each with a context) may share a thread
        out: dict[str, np.ndarray] = {}
        for name, cam_id in zip(self.cameras, self._cam_ids, strict=True):
            self._cam.fixedcamid = cam_id
            mujoco.mjv_updateScene(
                self.model, data, self._opt, None, self._cam, mujoco.mjtCatBit.mjCAT_ALL, self._scene
            )
            mujoco.mjr_render(self._rect, self._scene, self._mjr)
            mujoco.mjr_readPixels(self._buf, None, self._rect, self._mjr)
            frame = self._buf[::-1].copy()  # GL rows start at the bottom
            out[name] = frame if self._process is None else self._process(frame)
        return out

    def close(self) -> None:
        # GL frees act on the *current* context, so ours must be current or another env's goes black.
        if self._ctx is not None:
            self._ctx.make_current()
            self._mjr.free()
            self._ctx.free()
            self._ctx = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001  (at interpreter exit the EGL display may already be gone)
            pass


def gl_available() -> bool:
    """Whether an offscreen context can be made here (tests use it to skip pixel checks cleanly)."""
    model = mujoco.MjModel.from_xml_string('<mujoco><worldbody><camera name="c"/></worldbody></mujoco>')
    try:
        CameraRenderer(model, ("c",), 8).close()
    except RuntimeError:
        return False
    return True
