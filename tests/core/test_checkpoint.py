"""Checkpoints: only the latest keeps the replay buffers, and a resume restores them from it."""

from pathlib import Path

import numpy as np
import pytest
import torch

from robot_rl.buffers import ReplayBuffer
from robot_rl.checkpoint import Checkpoint, latest_checkpoint, save_checkpoint
from robot_rl.errors import UserError
from robot_rl.types import Transition


def filled_buffer(n: int, seed: int) -> ReplayBuffer:
    buf = ReplayBuffer(64, seed=seed)
    rng = np.random.default_rng(seed)
    for i in range(n):
        obs, nxt = {"state": rng.normal(size=3).astype(np.float32)}, {"state": rng.normal(size=3).astype(np.float32)}
        buf.add(Transition(obs, rng.normal(size=2).astype(np.float32), float(i), nxt, False, i % 5 == 4))
    return buf


def test_only_the_latest_checkpoint_keeps_buffers_and_resume_restores_them(tmp_path: Path) -> None:
    model = torch.nn.Linear(3, 2)
    opts = {"opt": torch.optim.Adam(model.parameters())}
    buf = filled_buffer(10, seed=0)
    first = save_checkpoint(tmp_path, "step_1", model, opts, {"env_steps": 1}, "x: 1\n", {"online": buf})
    assert list(first.glob("buffer_*.npz"))
    for i in range(10):  # more data before the next checkpoint
        buf.add(Transition({"state": np.full(3, i, np.float32)}, np.zeros(2, np.float32), 1.0,
                           {"state": np.full(3, i + 1, np.float32)}, False, False))  # fmt: skip
    second = save_checkpoint(tmp_path, "step_2", model, opts, {"env_steps": 2}, "x: 1\n", {"online": buf})
    assert not list(first.glob("buffer_*.npz")) and (first / "model.safetensors").exists()
    assert latest_checkpoint(tmp_path) == second and list(second.glob("buffer_*.npz"))

    restored = ReplayBuffer(64, seed=1)
    counters = Checkpoint(second).restore(torch.nn.Linear(3, 2), buffers={"online": restored})
    assert counters["env_steps"] == 2 and len(restored) == len(buf) == 20
    np.testing.assert_array_equal(restored.obs["state"], buf.obs["state"])


def test_a_checkpoint_from_before_obs_frame_or_action_history_keeps_its_observation(tmp_path: Path) -> None:
    from omegaconf import OmegaConf

    from robot_rl.config import TrainConfig

    saved = OmegaConf.to_container(OmegaConf.structured(TrainConfig))
    (tmp_path / "model.safetensors").write_bytes(b"")
    (tmp_path / "config.yaml").write_text(OmegaConf.to_yaml(saved))
    assert Checkpoint(tmp_path).cfg.env.obs_frame == "relative"  # today's default, recorded
    del saved["env"]["obs_frame"]
    (tmp_path / "config.yaml").write_text(OmegaConf.to_yaml(saved))
    assert Checkpoint(tmp_path).cfg.env.obs_frame == "absolute"
    del saved["env"]["randomization"]["action_history"]
    for old, history in ((True, 1), (False, 0)):
        saved["env"]["randomization"]["observe_last_action"] = old
        (tmp_path / "config.yaml").write_text(OmegaConf.to_yaml(saved))
        assert Checkpoint(tmp_path).cfg.env.randomization.action_history == history


def test_a_truncated_checkpoint_file_is_named_not_a_traceback(tmp_path: Path) -> None:
    model = torch.nn.Linear(3, 2)
    opts = {"opt": torch.optim.Adam(model.parameters())}
    model(torch.ones(1, 3)).sum().backward()
    opts["opt"].step()  # an optimizer with state to save
    buffers = {"online": filled_buffer(10, seed=0)}
    ckpt = save_checkpoint(tmp_path, "step_1", model, opts, {"env_steps": 1}, "x: 1\n", buffers)
    for name in ("model.safetensors", "optim.safetensors", "buffer_online.npz"):
        f = ckpt / name
        whole = f.read_bytes()
        f.write_bytes(whole[: len(whole) // 2])  # a copy cut short
        with pytest.raises(UserError, match=f"{name}: damaged or truncated checkpoint file"):
            Checkpoint(ckpt).restore(torch.nn.Linear(3, 2), opts, {"online": ReplayBuffer(64)})
        f.write_bytes(whole)
