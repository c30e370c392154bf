"""Self-describing checkpoint folders: resolved config + safetensors weights + optimizer state + counters.

Written under a temporary name and renamed, so a run killed mid-save leaves the previous checkpoint intact.
No pickle: tensors go to safetensors, everything else to JSON or npz.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException
from safetensors.torch import save_file

from robot_rl.algos.registry import algorithm
from robot_rl.buffers import ReplayBuffer
from robot_rl.config import TrainConfig, input_pipeline
from robot_rl.errors import UserError, read_tensors
from robot_rl.policies.chunked import ChunkPolicy
from robot_rl.policies.gaussian import GaussianPolicy
from robot_rl.types import ObsLayout

LATEST = "latest"
LAYOUT = "layout.json"  # {"env": what the env / robot provides, "policy": what the network reads and emits}


def _flatten_optimizer(opt: torch.optim.Optimizer, prefix: str) -> tuple[dict[str, torch.Tensor], dict]:
    sd = opt.state_dict()
    tensors = {}
    for pid, state in sd["state"].items():
        for k, v in state.items():
            tensors[f"{prefix}.{pid}.{k}"] = torch.as_tensor(v).detach().cpu().contiguous()
    return tensors, {"param_groups": sd["param_groups"], "param_ids": list(sd["state"].keys())}


def _unflatten_optimizer(tensors: Mapping[str, torch.Tensor], meta: dict, prefix: str) -> dict:
    state: dict[int, dict[str, torch.Tensor]] = {pid: {} for pid in meta["param_ids"]}
    for key, v in tensors.items():
        if key.startswith(prefix + "."):
            pid, name = key[len(prefix) + 1 :].split(".", 1)
            state[int(pid)][name] = v
    return {"state": state, "param_groups": meta["param_groups"]}


def save_checkpoint(
    ckpt_root: Path,
    name: str,
    model: torch.nn.Module,
    optimizers: Mapping[str, torch.optim.Optimizer],
    counters: Mapping[str, int | float],
    config_yaml: str,
    buffers: Mapping[str, ReplayBuffer] | None = None,
    layouts: Mapping[str, ObsLayout] | None = None,
) -> Path:
    """Writes `ckpt_root/name/` atomically and points `ckpt_root/latest` at it; `layouts` ("env", "policy") go to
    layout.json, from which a policy is built without an env (`Checkpoint.policy`). Only the latest checkpoint keeps
    replay buffers (a resume reads the latest; older ones keep the policy for eval and replay): a pixel run's buffers
    are gigabytes per checkpoint."""
    ckpt_root.mkdir(parents=True, exist_ok=True)
    final = ckpt_root / name
    tmp = ckpt_root / f".{name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(tmp / "model.safetensors"))
    opt_tensors, opt_meta = {}, {}
    for oname, opt in optimizers.items():
        t, m = _flatten_optimizer(opt, oname)
        opt_tensors.update(t)
        opt_meta[oname] = m
    save_file(opt_tensors, str(tmp / "optim.safetensors"))
    (tmp / "optim.json").write_text(json.dumps(opt_meta))
    for bname, buf in (buffers or {}).items():
        buf.save(tmp / f"buffer_{bname}.npz")
    (tmp / "config.yaml").write_text(config_yaml)
    if layouts:
        (tmp / LAYOUT).write_text(json.dumps({k: v.to_dict() for k, v in layouts.items()}, indent=1))
    (tmp / "counters.json").write_text(json.dumps(dict(counters), indent=1))
    _fsync_dir(tmp)
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    previous = (ckpt_root / LATEST).read_text().strip() if (ckpt_root / LATEST).exists() else name
    latest_tmp = ckpt_root / f".{LATEST}.tmp-{os.getpid()}"
    latest_tmp.write_text(name)
    os.replace(latest_tmp, ckpt_root / LATEST)
    _fsync_dir(ckpt_root)
    if buffers and previous != name:  # only now: a crash before the pointer moved leaves the old one whole
        for f in (ckpt_root / previous).glob("buffer_*.npz"):
            f.unlink()
    return final


def _fsync_dir(path: Path) -> None:
    for f in path.iterdir():
        if f.is_file():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def latest_checkpoint(ckpt_root: Path) -> Path | None:
    pointer = ckpt_root / LATEST
    if not pointer.exists():
        return None
    path = ckpt_root / pointer.read_text().strip()
    if not (path / "counters.json").exists():
        raise UserError(f"checkpoint pointer {pointer} names {path}, which is missing or incomplete")
    return path


class Checkpoint:
    """A checkpoint folder read once: where it is, the config it was trained with and its layouts (what the env
    provides, what the policy reads and emits); weights are read when asked for. Deploy, eval, `init_from`, a
    residual base and a resume each open it once and pass it down, instead of resolving the folder and parsing its
    config again at every step. The config and layouts are read on first use (a resume needs neither)."""

    def __init__(self, path: Path | str) -> None:
        """`path`: a checkpoint folder, or a run dir (its final checkpoint; its latest while unfinished)."""
        self.path = _resolve(Path(path))

    @functools.cached_property
    def cfg(self) -> TrainConfig:
        return _read_config(self.path)

    @functools.cached_property
    def layouts(self) -> dict[str, ObsLayout]:
        return _read_layouts(self.path, self.cfg)

    @property
    def run_dir(self) -> Path:
        """The run it belongs to (`<run>/checkpoints/<name>`), where the run's classifier is saved."""
        return self.path.parent.parent

    def weights(self, device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
        return read_tensors(self.path / "model.safetensors", device)

    def counters(self) -> dict:
        return json.loads((self.path / "counters.json").read_text())

    def policy(self) -> GaussianPolicy | ChunkPolicy:
        """The actor network (weights + normalisation), built from the layout alone: no env, no simulator. What eval,
        the deployment node and a residual base run."""
        cfg, lay = self.cfg, self.layouts["policy"]
        policy = algorithm(cfg.algo).build_policy(cfg, lay.state_dim, lay.action_dim, lay.cameras, lay.image_size or 64)
        policy.load_state_dict({k[len("policy.") :]: v for k, v in self.weights().items() if k.startswith("policy.")})
        return policy.eval()

    @property
    def pipeline(self) -> dict[str, Any]:
        """Its input pipeline beyond the layout (`config.INPUT_PIPELINE`), as it was trained."""
        return input_pipeline(self.cfg)

    def start(self, model: torch.nn.Module, cfg: TrainConfig, layout: ObsLayout, device: torch.device) -> None:
        """Starts `model` (a run of `cfg` observing `layout`) from these weights (`init_from`): the layouts must agree
        field for field, the input pipelines value for value (`robot-rl train` takes the checkpoint's), and the
        networks in shape."""
        if diff := self.layouts["policy"].differences(layout):
            raise UserError(
                f"init_from={self.path}: its policy observes another layout than this run ({'; '.join(diff)})"
            )
        if diff := pipeline_differences(self.pipeline, input_pipeline(cfg)):
            raise UserError(f"init_from={self.path}: its policy was trained with {diff}; set the checkpoint's values")
        weights = {k: v for k, v in self.weights(device).items() if not k.startswith("anchor_head.")}
        if getattr(model, "anchor_head", None) is not None:  # the policy it starts from, which it is held near
            weights |= {"anchor_head." + k.removeprefix("policy.head."): v for k, v in weights.items()
                        if k.startswith("policy.head.")}  # fmt: skip
        try:
            model.load_state_dict(weights)
        except RuntimeError as e:
            first = str(e).splitlines()[1].strip() if len(str(e).splitlines()) > 1 else str(e)
            raise UserError(
                f"init_from={self.path}: its networks differ from this run's sac settings ({first})"
            ) from None

    def restore(
        self,
        model: torch.nn.Module,
        optimizers: Mapping[str, torch.optim.Optimizer] | None = None,
        buffers: Mapping[str, ReplayBuffer] | None = None,
        device: torch.device | str = "cpu",
    ) -> dict:
        """Restores a run in place (a resume: weights, optimisers, buffers); returns its counters."""
        model.load_state_dict(self.weights(device))
        if optimizers:
            tensors = read_tensors(self.path / "optim.safetensors", device)
            meta = json.loads((self.path / "optim.json").read_text())
            for oname, opt in optimizers.items():
                opt.load_state_dict(_unflatten_optimizer(tensors, meta[oname], oname))
        for bname, buf in (buffers or {}).items():
            buf.load(self.path / f"buffer_{bname}.npz")
        return self.counters()


def pipeline_differences(theirs: dict[str, Any], mine: dict[str, Any]) -> str:
    """ "key=theirs (this run: mine), ..." for the keys whose values differ; "" when none do."""
    return ", ".join(f"{k}={theirs[k]} (this run: {mine[k]})" for k in theirs if theirs[k] != mine[k])


def _resolve(path: Path) -> Path:
    """A checkpoint folder, or a run dir's final checkpoint (its latest while it is unfinished or interrupted)."""
    if (path / "config.yaml").is_file() and (path / "model.safetensors").is_file():
        return path
    if (path / "checkpoints").is_dir():
        final = path / "checkpoints" / "final"
        found = final if (final / "counters.json").is_file() else latest_checkpoint(path / "checkpoints")
        if found is None:
            raise UserError(f"{path}: the run has no checkpoint yet")
        return found
    if not path.exists():
        raise UserError(f"{path}: no such run dir or checkpoint folder")
    raise UserError(f"{path}: neither a run dir nor a checkpoint folder (no config.yaml + model.safetensors)")


def _read_config(path: Path) -> TrainConfig:
    """The resolved config a checkpoint folder was trained with, older spellings brought up to date."""
    try:
        saved = OmegaConf.load(path / "config.yaml")
        if "env" in saved and "obs_frame" not in saved.env:  # from before `env.obs_frame`: it observed absolute
            saved.env.obs_frame = "absolute"
        if "env" in saved and "limits" in saved.env:  # from before `env.for_robot`, which took over its job
            saved.env.for_robot = saved.env.pop("limits")
        rand = saved.get("env", {}).get("randomization", {})
        if "observe_last_action" in rand:  # from before `action_history`: a bool for one action
            rand.action_history = int(rand.pop("observe_last_action"))
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(TrainConfig), saved))
    except (OmegaConfBaseException, yaml.YAMLError) as e:
        raise UserError(f"{path}: not a robot_rl checkpoint ({' '.join(str(e).split())})") from None


def _read_layouts(path: Path, cfg: TrainConfig) -> dict[str, ObsLayout]:
    """{"env": ..., "policy": ...} of a checkpoint folder. Checkpoints from before layout.json: the env's from the
    robot config or a sim env of the task (the one fallback that builds an env), the policy's from its weights."""
    if (path / LAYOUT).is_file():
        return {k: ObsLayout.from_dict(v) for k, v in json.loads((path / LAYOUT).read_text()).items()}
    from robot_rl.envs import make_env, robot_layout

    if cfg.robot is not None:
        env_layout = robot_layout(cfg.env, cfg.robot)
    else:
        env = make_env(cfg.env)
        env_layout = ObsLayout.of_env(env, cfg.env.max_step, cfg.env.control_hz)
        env.close()
    weights = read_tensors(path / "model.safetensors")
    state_dim = weights["policy.encoder.state_mean"].shape[0]
    cameras = tuple(c for c in env_layout.cameras if any(k.startswith(f"policy.encoder.convs.{c}.") for k in weights))
    policy = env_layout.replace(cameras=cameras, image_size=env_layout.image_size if cameras else 0)
    if state_dim > env_layout.state_dim:  # a residual agent: the base action appended
        policy = policy.replace(state={**env_layout.state, "base_action": (env_layout.state_dim, state_dim)})
    if (action_dim_from := algorithm(cfg.algo).action_dim_from) is not None:  # e.g. DSRL's noise space
        policy = policy.replace(action_dim=action_dim_from(weights))
    return {"env": env_layout, "policy": policy}
