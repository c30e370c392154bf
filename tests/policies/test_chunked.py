"""Action-chunk policies: the noise seam, the chunk queue, and that BC training fits demo chunks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robot_rl.policies.base import Policy
from robot_rl.policies.chunked import ChunkPolicyConfig, make_chunk_policy
from robot_rl.types import Batch

STATE, DA = 6, 4


def policy(kind: str = "diffusion", **kw):
    torch.manual_seed(0)
    return make_chunk_policy(ChunkPolicyConfig(kind=kind, **kw), STATE, DA).eval()


def obs(b: int = 2, to: int = 2, seed: int = 0) -> dict[str, torch.Tensor]:
    return {"state": torch.randn(b, to, STATE, generator=torch.Generator().manual_seed(seed))}


def test_fixed_noise_gives_identical_chunks_and_other_noise_differs() -> None:
    p = policy()
    assert isinstance(p, Policy)
    o = obs()
    n1 = torch.randn(2, *p.noise_shape)
    a = p.predict_action_chunk(o, noise=n1)
    b = p.predict_action_chunk(o, noise=n1.clone())
    c = p.predict_action_chunk(o, noise=torch.randn(2, *p.noise_shape))
    assert a.shape == (2, p.cfg.n_action_steps, DA)
    assert torch.equal(a, b)
    assert not torch.allclose(a, c)
    assert a.abs().max() <= 1.0


def test_noise_of_the_wrong_shape_is_refused() -> None:
    p = policy()
    with pytest.raises(ValueError, match="noise must have shape"):
        p.predict_action_chunk(obs(), noise=torch.randn(2, 3, DA))


@pytest.mark.parametrize("steps", [5, 10, 20])
def test_ddim_steps_are_configurable(steps: int) -> None:
    p = policy(num_inference_steps=steps)
    assert len(p.sample_scheduler.timesteps) == steps
    assert torch.isfinite(p.predict_action_chunk(obs(), noise=torch.randn(2, *p.noise_shape))).all()


def test_select_action_replans_every_n_action_steps_with_the_given_noise() -> None:
    p = policy(n_action_steps=3)
    rng = np.random.default_rng(0)
    frames = [{"state": rng.normal(size=STATE).astype(np.float32)} for _ in range(7)]
    noise = torch.randn(1, *p.noise_shape)
    p.reset()
    acts = [p.select_action(f, noise=noise) for f in frames[:3]]
    assert p.queued == 0
    # The first chunk was planned from [frame0, frame0] (history padded at episode start) and `noise`.
    stacked = {"state": torch.from_numpy(np.stack([frames[0]["state"]] * 2))[None]}
    with torch.no_grad():
        expected = p.predict_action_chunk(stacked, noise=noise)[0].numpy()
    np.testing.assert_allclose(np.stack(acts), expected, atol=1e-6)
    p.select_action(frames[3], noise=noise)  # a re-plan, now conditioned on [frame2, frame3]
    assert p.queued == 2
    p.reset()
    assert p.queued == 0


@pytest.mark.parametrize("kind", ["diffusion", "mlp"])
def test_bc_loss_falls_on_a_fixed_mapping(kind: str) -> None:
    """Chunks that are a fixed function of the observation: training must fit them much better than at init."""
    torch.manual_seed(0)
    p = make_chunk_policy(ChunkPolicyConfig(kind=kind), STATE, DA)
    o = obs(b=128, seed=1)
    w = torch.randn(STATE, DA)
    target = torch.tanh(o["state"][:, -1] @ w)[:, None].expand(-1, p.cfg.horizon, -1).contiguous()
    batch = Batch.of_windows(o, target)
    opt = torch.optim.AdamW(p.parameters(), lr=1e-3)
    first = p.compute_loss(batch)[0].item()
    for _ in range(300):
        loss, _ = p.compute_loss(batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
    last = np.mean([p.compute_loss(batch)[0].item() for _ in range(5)])
    assert last < 0.3 * first, (first, last)
    if kind == "diffusion":  # and sampling then reproduces the mapping
        p.eval()
        err = (p.predict_action_chunk(o, deterministic=True) - target[:, : p.cfg.n_action_steps]).abs().mean()
        assert err < 0.25, err
