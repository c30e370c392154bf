"""RL on a frozen pi0 VLA: residual and DSRL adapters load a VLA checkpoint folder as their base, the SAC agent
acts on proprio only (`agent_cameras=false`) while the VLA reads the cameras, and updates never touch the VLA."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from frozen_base import run_and_check_base_frozen

pytest.importorskip("transformers", minversion="5.23")
pytest.importorskip("peft")

from robot_rl.algos.dsrl import DSRLConfig, NoiseEnv  # noqa: E402
from robot_rl.algos.residual import ResidualConfig, ResidualEnv  # noqa: E402
from robot_rl.config import load_config  # noqa: E402
from robot_rl.envs import make_env  # noqa: E402
from robot_rl.errors import UserError  # noqa: E402
from robot_rl.loop.adapters import load_base  # noqa: E402
from robot_rl.policies.vla import LoraSettings, PI0Policy, VLAConfig, apply_lora  # noqa: E402
from robot_rl.policies.vla.pi0 import load_policy as load_vla  # noqa: E402
from robot_rl.policies.vla.pi0 import tiny_pi0_config  # noqa: E402
from robot_rl.sim.config import EnvConfig  # noqa: E402
from robot_rl.types import ObsLayout  # noqa: E402

os.environ.setdefault("MUJOCO_GL", "egl")
CAMS = ("front", "wrist")
PIXELS = EnvConfig(obs="pixels", image_size=32)
pytestmark = pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")


def tiny_vla(seed: int = 0) -> PI0Policy:
    cfg = VLAConfig(cameras=CAMS, state_dim=7, action_dim=4, n_action_steps=4, max_text_len=32)
    return PI0Policy.from_config(tiny_pi0_config(chunk_size=8), cfg, seed=seed).eval()


@pytest.fixture(scope="module")
def vla_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What `robot-rl vla-sft` writes: a LoRA adapter checkpoint pointing at saved random-init base weights.
    The adapters' B matrices are set non-zero so they change the output (and must stay frozen too)."""
    root = tmp_path_factory.mktemp("vla_rl")
    policy = tiny_vla()
    policy.save_pretrained(root / "base")
    policy.base_path = (root / "base").resolve()
    apply_lora(policy, LoraSettings(r=4, alpha=8))
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.05)
    return policy.eval().save(root / "checkpoints" / "final")


def test_load_base_detects_vla_folders_and_refuses_others(vla_dir: Path, tmp_path: Path) -> None:
    base = load_base(vla_dir)
    assert isinstance(base, PI0Policy) and base.finetune == "lora"
    assert not any(p.requires_grad for p in base.parameters())
    with pytest.raises(UserError, match="checkpoints/final"):
        load_base(vla_dir.parent.parent)  # the vla-sft output folder itself
    with pytest.raises(UserError, match="not a base policy folder"):
        load_base(tmp_path)
    cfg = load_config(["algo=residual", f"residual.base={vla_dir}"])
    from robot_rl.loop.adapters import agent_env

    with pytest.raises(UserError, match="env.obs=pixels"):
        agent_env(cfg, make_env(EnvConfig()))  # state-only env: the VLA has no cameras to read


def test_vla_base_in_bf16_acts_like_the_fp32_one(vla_dir: Path) -> None:
    """On a GPU with bf16, load_base loads a VLA in bf16; checked here on CPU through the same `dtype`: bf16 base
    weights, fp32 LoRA adapters that still act, the fp32 chunk to bf16 precision. On CPU load_base keeps fp32."""
    fp32 = load_base(vla_dir, "cpu")
    assert fp32.device.type == "cpu" and fp32.model.dtype == torch.float32
    bf16 = load_vla(vla_dir, dtype=torch.bfloat16)
    assert bf16.model.dtype == torch.bfloat16 and bf16.finetune == "lora"
    assert all(p.dtype == torch.float32 for n, p in bf16.named_parameters() if "lora_" in n)
    g = torch.Generator().manual_seed(0)
    obs = {"state": torch.randn(4, 7, generator=g)}
    obs |= {c: torch.randint(0, 256, (4, 32, 32, 3), dtype=torch.uint8, generator=g) for c in CAMS}
    noise = torch.randn(4, *fp32.noise_shape, generator=g)
    a32, a16 = (p.predict_full_chunk(obs, noise=noise) for p in (fp32, bf16))
    base16 = load_vla(vla_dir.parent.parent / "base", dtype=torch.bfloat16).predict_full_chunk(obs, noise=noise)
    assert a16.dtype == torch.float32 and not torch.allclose(a16, base16, atol=0.05)  # the adapters act
    # Every op runs in bf16, not only the matmuls: 0.069 at most here, where fp32 weights under a bf16 autocast
    # (bf16 matmuls only) stay within 0.002.
    torch.testing.assert_close(a16, a32, rtol=0, atol=0.1)


def test_vla_noise_is_used_only_when_a_chunk_is_planned() -> None:
    policy, env = tiny_vla(), make_env(PIXELS, seed=0)
    obs, _ = env.reset(seed=0)
    n1, n2 = (torch.randn(1, *policy.noise_shape, generator=torch.Generator().manual_seed(s)) for s in (1, 2))
    first = policy.select_action(obs, noise=n1)
    rest = [policy.select_action(obs, noise=n2) for _ in range(policy.n_action_steps - 1)]  # queued: n2 ignored
    chunk = policy.predict_action_chunk({k: torch.as_tensor(v)[None] for k, v in obs.items()}, noise=n1)[0]
    np.testing.assert_allclose(np.stack([first, *rest]), chunk.numpy(), atol=1e-6)
    assert policy.queued == 0


def test_dsrl_on_the_vla_executes_the_chunk_of_the_agents_noise() -> None:
    policy = tiny_vla()
    env = NoiseEnv(make_env(PIXELS, seed=0), policy, DSRLConfig(noise_bound=1.0, agent_cameras=False))
    assert env.action_space.shape == (int(np.prod(policy.noise_shape)),)  # (chunk_size, max_action_dim)
    assert set(env.observation_space.spaces) == {"state"}
    obs, _ = env.reset(seed=0)
    assert set(obs) == {"state"}
    a = np.random.default_rng(0).uniform(-1, 1, env.action_space.shape).astype(np.float32)
    obs, _, term, trunc, info = env.step(a)
    assert set(obs) == {"state"} and (info["chunk_length"] == policy.n_action_steps or term or trunc)
    raw = make_env(PIXELS, seed=0)
    o, _ = raw.reset(seed=0)
    expected = policy.predict_action_chunk({k: torch.as_tensor(v)[None] for k, v in o.items()}, noise=env.noise(a))
    np.testing.assert_allclose(info["chunk_actions"][0], expected[0, 0].numpy(), atol=1e-6)


def test_residual_on_the_vla_starts_at_the_base_and_hides_the_cameras() -> None:
    policy = tiny_vla()
    env = ResidualEnv(make_env(PIXELS, seed=0), policy, ResidualConfig(agent_cameras=False))
    lay = ObsLayout.of_env(env)
    assert (lay.state_dim, lay.cameras, lay.image_size) == (7 + 4, (), 0)
    obs, _ = env.reset(seed=0)
    assert set(obs) == {"state"}
    base = env.base_action.copy()
    obs, _, _, _, info = env.step(np.zeros(4, np.float32))
    np.testing.assert_array_equal(info["executed_action"], base)
    assert set(obs) == {"state"} and np.array_equal(obs["state"][-4:], env.base_action)
    with_cams = ResidualEnv(make_env(PIXELS, seed=0), tiny_vla(), ResidualConfig())
    lay = ObsLayout.of_env(with_cams)
    assert (lay.state_dim, lay.cameras, lay.image_size) == (7 + 4, CAMS, 32)  # the default keeps today's behaviour


@pytest.mark.parametrize(
    ("algo", "agent_cameras"),
    [("residual", False), ("residual", True), ("dsrl", False)],
    ids=["residual-state", "residual-pixels", "dsrl-state"],
)
def test_rl_updates_leave_every_vla_weight_unchanged(
    algo: str, agent_cameras: bool, vla_dir: Path, tmp_path: Path
) -> None:
    """The VLA counterpart of tests/core/test_steering.py::test_updates_never_touch_the_frozen_base (pixel env,
    LoRA adapters included in the comparison). residual-pixels also converts demos through the VLA."""
    cfg = load_config([
        f"algo={algo}", f"{algo}.base={vla_dir}", f"{algo}.agent_cameras={str(agent_cameras).lower()}",
        f"run_dir={tmp_path}", "env.obs=pixels", "env.image_size=32", "loop.learning_starts=8",
        f"demos.n_episodes={2 if agent_cameras else 0}", "sac.hidden=[32,32]", "sac.batch_size=16", "threads=1",
    ])  # fmt: skip
    steps = 12 if algo == "dsrl" else 24  # a DSRL step is a whole chunk
    keys = {"state", *(CAMS if agent_cameras else ())}
    bases = run_and_check_base_frozen(cfg, steps, obs_keys=keys)
    assert all(isinstance(b, PI0Policy) for b in bases)
    assert any("lora_B" in k for k in bases[0].state_dict())
