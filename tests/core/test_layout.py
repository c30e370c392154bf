"""Every checkpoint carries its observation layout: a robot PC loads and runs any policy with no env and without
MuJoCo installed (here: made unimportable in a fresh interpreter)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from robot_rl.algos.registry import algorithm
from robot_rl.checkpoint import save_checkpoint
from robot_rl.config import TrainConfig, load_config
from robot_rl.envs import robot_layout
from robot_rl.loop.bc import train_bc
from robot_rl.loop.trainer import train
from robot_rl.real.config import load_robot_config
from robot_rl.sim.config import EnvConfig
from robot_rl.types import ObsLayout

TINY = ["loop.eval_every=0", "loop.final_eval_episodes=1", "loop.checkpoint_every=0", "profile=cpu", "threads=1"]

# Runs in a fresh interpreter where `import mujoco` fails: loads each checkpoint, and acts on an observation of its
# env layout as deploy would (a residual agent with its frozen base).
NO_MUJOCO = """
import json, sys
sys.modules["mujoco"] = None
import numpy as np
from robot_rl.algos.registry import algorithm
from robot_rl.checkpoint import Checkpoint
from robot_rl.loop.adapters import env_policy
out = []
for path in sys.argv[1:]:
    if path.startswith("vla:"):  # a VLA folder (vla-sft's or a pi0 save), as residual / DSRL load their base
        from robot_rl.loop.adapters import load_base
        vla = load_base(path[4:])
        obs = {"state": np.zeros(7, np.float32), **{c: np.zeros((32, 32, 3), np.uint8) for c in ("front", "wrist")}}
        action = np.asarray(vla.select_action(obs, deterministic=True))
        out.append(["vla", action.shape[0], bool(np.isfinite(action).all())])
        continue
    ckpt = Checkpoint(path)
    agent, cfg, lay = ckpt.policy(), ckpt.cfg, ckpt.layouts
    space = lay["env"].observation_space()
    space.seed(0)
    obs = {k: v.astype(np.float32) if k == "state" else v for k, v in space.sample().items()}
    stepwise = not algorithm(cfg.algo).not_stepwise
    policy = env_policy(cfg, agent) if stepwise else agent
    if not stepwise:  # DSRL: the agent reads the policy layout and emits noise
        obs = {k: obs[k] for k in lay["policy"].observation_space().spaces}
    action = np.asarray(policy.select_action(obs, deterministic=True))
    out.append([cfg.algo + ("-robot" if cfg.robot else ""), action.shape[0], bool(np.isfinite(action).all())])
assert "mujoco" not in {m.split(".")[0] for m in sys.modules if sys.modules[m] is not None}
print(json.dumps(out))
"""


def run(overrides: list[str], run_dir: Path) -> Path:
    cfg = load_config([f"run_dir={run_dir}", *TINY, *overrides])
    (train_bc if algorithm(cfg.algo).offline else train)(cfg)
    return run_dir / "checkpoints" / "final"


def robot_checkpoint(root: Path) -> Path:
    """A robot run's checkpoint as the trainer writes one (a real robot run is tests/real/test_train_robot.py)."""
    from robot_rl.algos.sac import SAC, SACConfig

    cfg = TrainConfig(robot=load_robot_config("sim"), env=EnvConfig(obs="state"))
    lay = robot_layout(cfg.env, cfg.robot)
    algo = SAC(SACConfig(), lay.state_dim, lay.action_dim)
    yaml = OmegaConf.to_yaml(OmegaConf.structured(cfg))
    return save_checkpoint(root, "final", algo, {}, {"env_steps": 0}, yaml, layouts={"env": lay, "policy": lay})


def vla_checkpoint(root: Path) -> Path:
    """A random-init tiny pi0 saved as `robot-rl vla-sft` saves its base (the vla extra)."""
    vla = pytest.importorskip("robot_rl.policies.vla")
    cfg = vla.VLAConfig(cameras=("front", "wrist"), state_dim=7, action_dim=4, n_action_steps=4, max_text_len=32)
    return vla.PI0Policy.from_config(vla.tiny_pi0_config(chunk_size=8), cfg, seed=0).save_pretrained(root)


@pytest.mark.slow
def test_every_checkpoint_kind_loads_and_acts_without_mujoco(tmp_path: Path, pickcube_run: Path) -> None:
    bc = run(["algo=bc_diffusion", "bc.steps=2", "demos.n_episodes=2"], tmp_path / "bc")
    pixels = run(["obs=pixels", "env.image_size=32", "loop.env_steps=5", "demos.n_episodes=2",
                  "sac.trunk_pretrain_steps=2"], tmp_path / "pixels")  # fmt: skip
    residual = run(["algo=residual", f"residual.base={bc}", "loop.env_steps=5", "demos.n_episodes=1"],
                   tmp_path / "residual")  # fmt: skip
    dsrl = run(["algo=dsrl", f"dsrl.base={bc}", "loop.env_steps=3", "loop.learning_starts=1"], tmp_path / "dsrl")
    robot = robot_checkpoint(tmp_path / "robot")
    vla = vla_checkpoint(tmp_path / "vla")
    kinds = [pickcube_run, pixels, bc, residual, dsrl, robot]
    for ckpt in kinds:
        saved = json.loads(
            (Path(ckpt) / "checkpoints" / "final" / "layout.json").read_text()
            if (Path(ckpt) / "checkpoints").is_dir()
            else (Path(ckpt) / "layout.json").read_text()
        )
        assert set(saved) == {"env", "policy"}
        ObsLayout.from_dict(saved["policy"])
    argv = [sys.executable, "-c", NO_MUJOCO, *map(str, kinds), f"vla:{vla}"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    acted = json.loads(done.stdout.splitlines()[-1])
    assert [a[0] for a in acted] == ["sac", "sac", "bc", "residual", "dsrl", "sac-robot", "vla"]
    assert all(finite for _, _, finite in acted)
    assert [a[1] for a in acted] == [4, 4, 4, 4, acted[4][1], 4, 4] and acted[4][1] > 4  # DSRL: a chunk's noise


def test_a_missing_mujoco_fails_the_check() -> None:
    """The subprocess check can fail: building a sim env there dies on the blocked import."""
    code = (
        'import sys; sys.modules["mujoco"] = None\nfrom robot_rl.envs import make_env\n'
        "from robot_rl.sim.config import EnvConfig\nmake_env(EnvConfig())"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "mujoco" in done.stderr
