"""SAC pieces: termination masks bootstrapping, truncation does not, the ensemble is one batched module."""

import pytest
import torch

from robot_rl.algos.sac import SAC, SACConfig
from robot_rl.types import Batch


def batch(n: int, reward: float, terminated: float, state_dim: int = 3) -> Batch:
    s = torch.zeros(n, state_dim)
    return Batch(
        obs={"state": s},
        action=torch.zeros(n, 2),
        reward=torch.full((n,), reward),
        next_obs={"state": s},
        terminated=torch.full((n,), terminated),
        intervened=torch.zeros(n),
    )


def fit_q(terminated: float, steps: int = 600, bf16: str = "off", compile: bool = False) -> float:
    torch.manual_seed(0)
    cfg = SACConfig(
        hidden=(32, 32), discount=0.9, critic_lr=3e-3, tau=0.05, init_temperature=1e-4, temp_lr=0.0, bf16=bf16,
        compile=compile,
    )  # fmt: skip
    sac = SAC(cfg, state_dim=3, act_dim=2)
    b = batch(64, reward=1.0, terminated=terminated)
    for _ in range(steps):
        sac.update([b])
    with torch.no_grad():
        return sac.critic(b.obs["state"], b.action).mean().item()


def test_terminal_transition_does_not_bootstrap() -> None:
    # A self-loop with reward 1: terminal => Q = r = 1; non-terminal (e.g. truncated) => Q -> r / (1 - gamma) = 10.
    q_term = fit_q(terminated=1.0)
    q_boot = fit_q(terminated=0.0, steps=1500)
    assert abs(q_term - 1.0) < 0.15, q_term
    assert q_boot > 4.0, q_boot


def test_bf16_update_fits_q_and_keeps_fp32_outputs() -> None:
    # bf16 matmuls with fp32 output layers and losses must still resolve Q = r / (1 - gamma) = 10.
    q_boot = fit_q(terminated=0.0, steps=1500, bf16="on")
    assert 8.0 < q_boot < 12.0, q_boot
    sac = SAC(SACConfig(hidden=(16,), bf16="on"), state_dim=3, act_dim=2)
    with sac._precision():
        q = sac.critic(torch.randn(5, 3), torch.rand(5, 2))
        action, logp = sac.policy.head(torch.randn(5, 3))
    assert q.dtype == action.dtype == logp.dtype == torch.float32
    assert all(p.dtype == torch.float32 for p in sac.parameters())


def test_compiled_losses_compute_what_eager_ones_do_and_fit_q() -> None:
    b = batch(64, reward=1.0, terminated=0.0)
    b.obs["state"].normal_()
    b.action.uniform_(-1, 1)
    sac = SAC(SACConfig(hidden=(32, 32), bf16="off", compile=True), state_dim=3, act_dim=2)
    critic_loss, actor_loss = sac._loss_fns()
    assert critic_loss != sac._critic_loss and actor_loss != sac._actor_loss  # bound methods compare equal when eager
    _, feat, q = critic_loss(b)  # the critic's own output is deterministic; the next action is drawn
    torch.testing.assert_close(q, sac._critic_loss(b)[2])
    torch.testing.assert_close(feat, b.obs["state"])
    q_boot = fit_q(terminated=0.0, steps=1500, compile=True)  # Q = r / (1 - gamma) = 10 through compiled gradients
    assert 8.0 < q_boot < 12.0, q_boot


def test_bf16_setting_is_checked() -> None:
    sac = SAC(SACConfig(hidden=(16,), bf16="yes"), state_dim=3, act_dim=2)
    with pytest.raises(ValueError, match="bf16"):
        sac.update([batch(4, reward=0.0, terminated=0.0)])


def test_ensemble_members_are_independent_and_batched() -> None:
    sac = SAC(SACConfig(n_critics=10, critic_subsample=2), state_dim=5, act_dim=3)
    q = sac.critic(torch.randn(7, 5), torch.rand(7, 3))
    assert q.shape == (10, 7)
    assert q.std(dim=0).mean() > 0  # different initialisations per member
    assert sum(1 for _ in sac.critic.modules() if isinstance(_, torch.nn.Linear)) == 0  # no per-member Linear


def test_actor_update_leaves_critic_untouched() -> None:
    sac = SAC(SACConfig(hidden=(16,)), state_dim=3, act_dim=2)
    before = [p.clone() for p in sac.critic.parameters()]
    feat = torch.randn(8, 3)
    sac._actor_step(feat)
    assert all(torch.equal(a, b) for a, b in zip(before, sac.critic.parameters(), strict=True))


def test_pixels_encoder_is_trained_by_critic_only() -> None:
    cfg = SACConfig(hidden=(16,), image_feature_dim=8)
    sac = SAC(cfg, state_dim=2, act_dim=2, cameras=("front",), image_size=32)
    obs = {"state": torch.zeros(4, 2), "front": torch.randint(0, 255, (4, 32, 32, 3), dtype=torch.uint8)}
    b = Batch(
        obs=obs,
        action=torch.zeros(4, 2),
        reward=torch.ones(4),
        next_obs=obs,
        terminated=torch.zeros(4),
        intervened=torch.zeros(4),
    )
    enc_before = [p.clone() for p in sac.policy.encoder.parameters()]
    stats = sac.update([b])
    assert all(torch.isfinite(v) for v in stats.values())
    assert any(not torch.equal(a, p) for a, p in zip(enc_before, sac.policy.encoder.parameters(), strict=True))
    param_ids = {id(p) for g in sac.actor_opt.param_groups for p in g["params"]}
    assert not param_ids & {id(p) for p in sac.policy.encoder.parameters()}


class FirstActionQ(torch.nn.Module):
    """A critic ensemble of two whose Q is `scale` x the first action: its gradient pushes that action to +1."""

    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, feat: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.scale * action[:, 0].expand(2, -1)


def test_an_anchored_actor_stays_near_the_policy_it_started_from() -> None:
    """`sac.anchor`: a critic whose action gradient points one way moves a free actor's mean far in a hundred Adam
    steps however weak the gradient; the anchored actor stays near its start, yet follows a gradient that outweighs
    the anchor."""

    def drift(anchor: float, q_scale: float) -> float:
        torch.manual_seed(0)
        sac = SAC(SACConfig(hidden=(32, 32), anchor=anchor, temp_lr=0.0), state_dim=3, act_dim=2)
        sac.critic = FirstActionQ(q_scale)
        feat = torch.randn(64, 3)
        start = sac.policy.head(feat, deterministic=True)[0].detach()
        for _ in range(100):
            loss, _ = sac._actor_loss(feat)
            sac._step(sac.actor_opt, loss)
        return float((sac.policy.head(feat, deterministic=True)[0] - start)[:, 0].mean())

    free, held, strong = drift(0.0, 0.01), drift(1.0, 0.01), drift(1.0, 10.0)
    assert free > 0.3 and held < 0.05 * free, (free, held)
    assert strong > 0.3, strong


def test_a_frozen_encoder_is_not_trained_by_the_critic() -> None:
    cfg = SACConfig(hidden=(16,), image_feature_dim=8, frozen_encoder=True)
    sac = SAC(cfg, state_dim=2, act_dim=2, cameras=("front",), image_size=32)
    obs = {"state": torch.zeros(4, 2), "front": torch.randint(0, 255, (4, 32, 32, 3), dtype=torch.uint8)}
    b = Batch(obs=obs, action=torch.zeros(4, 2), reward=torch.ones(4), next_obs=obs, terminated=torch.zeros(4),
              intervened=torch.zeros(4))  # fmt: skip
    enc_before = [p.clone() for p in sac.policy.encoder.parameters()]
    critic_before = [p.clone() for p in sac.critic.parameters()]
    sac.update([b])
    assert all(torch.equal(a, p) for a, p in zip(enc_before, sac.policy.encoder.parameters(), strict=True))
    assert any(not torch.equal(a, p) for a, p in zip(critic_before, sac.critic.parameters(), strict=True))
