"""SAC in the RLPD / SERL style: LayerNorm critic ensemble, random-subset min target, learned temperature.

Read `update` top to bottom: critic steps (one per batch), then one actor + temperature step, Polyak after
every critic step. What actors run is `self.policy`; critics, targets and temperature are learner state.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch
from torch import nn

from robot_rl.buffers import ReplayBuffer
from robot_rl.errors import UserError
from robot_rl.hardware import bf16_is_fast
from robot_rl.nets import MLP, EnsembleMLP, ObsEncoder
from robot_rl.policies.gaussian import GaussianPolicy
from robot_rl.types import Batch


@dataclass
class SACConfig:
    hidden: tuple[int, ...] = (256, 256)  # actor and critic MLP widths
    n_critics: int = 2  # ensemble size; SERL uses 10 with subset 2 (worth it on a GPU, ~4x compute on CPU)
    critic_subsample: int = 2  # target = min over a random subset of this many members
    discount: float = 0.97  # short-horizon sparse tasks: ~30-step effective horizon
    tau: float = 0.005  # Polyak rate for target critics
    actor_lr: float = 3e-4
    critic_lr: float = 3e-4
    temp_lr: float = 3e-4
    init_temperature: float = 0.01  # small: sparse 0/1 rewards are easily swamped by entropy bonus
    target_entropy_scale: float = 0.5  # target entropy = -scale * Da (RLPD/SERL use 0.5)
    backup_entropy: bool = False  # SERL leaves the entropy term out of the TD target
    batch_size: int = 256  # total; split demo/online by `demo_ratio`
    demo_ratio: float = 0.5  # RLPD symmetric sampling
    utd: int = 2  # critic updates per env step; actor/temperature update once per env step
    image_feature_dim: int = 64
    pretrained_encoder: str = ""  # safetensors of a ConvEncoder (local path), loaded into every camera's encoder
    augment_pad: int = 4  # DrQ random shift in pixels; 0 disables
    augment_gray: float = 0.0  # probability an augmented frame is shown as grey (its luma), SimCLR-style
    # Each camera frame standardised per image and channel before the trunk (`nets.vision.standardize`): light
    # intensity, exposure and white balance mostly cancel. Part of the policy: it travels in the checkpoint's config.
    normalize_frames: bool = False
    # Camera conv trunks pretrained by behaviour cloning on the demos, then frozen: each frame is reduced to trunk
    # features once, as the replay buffer stores it, and the critic trains only the per-camera heads on them.
    frozen_trunk: bool = False
    trunk_pretrain_steps: int = 500  # BC steps on the demos before freezing (skipped with `pretrained_encoder`)
    # Frozen trunk: features of this many views of each frame are stored (the frame itself and DrQ-shifted copies)
    # and each sample draws one, so RL sees the augmentation the frozen trunk otherwise takes away. 1: the frame
    # only. Costs this many trunk passes per stored frame and times the feature memory.
    stored_views: int = 1
    zero_init_actor: bool = False  # last actor layer starts at zero: residual RL's step 0 is exactly the base
    # Fine-tuning from a checkpoint (`init_from`) on a few hundred of a new place's frames: the critic fitting them
    # through the encoder moves the features the actor reads, and Adam's steps move the actor at its full rate
    # however weak and extrapolated the new critic's action gradient is. `frozen_encoder` holds the encoder (its
    # camera heads); `anchor` adds anchor * |mean action - the starting policy's|^2 to the actor loss, so the
    # actor moves where the critic's gradient outweighs it. Both on by default from a checkpoint
    # (`config.FINETUNE_DEFAULTS`).
    frozen_encoder: bool = False
    anchor: float = 0.0
    # Update matmuls and convs in bfloat16 (weights, optimiser, output layers and losses stay fp32): "auto" turns it
    # on where a bf16 matmul times >= 1.5x fp32 at start-up (CPUs with native bf16, any bf16 GPU; an emulating CPU
    # would be slower), "on" / "off" force it.
    bf16: str = "auto"
    # On a CUDA learner the whole update (critic steps, actor, temperature, Polyak) is captured once as a CUDA graph
    # and replayed: eager, the host issues its thousands of small operations one by one, so launch overhead, not
    # the GPU, sets the rate at any batch size; replayed, the launches go. No effect on a CPU.
    cuda_graph: bool = True
    # On a CPU learner the critic and actor losses are compiled by torch.compile (inductor, C++ kernels): the
    # update's hundreds of small operations (autocast's casts, LayerNorms, elementwise) fuse, which pays in a long
    # run but costs seconds of compiling at the first update (fewer with inductor's cache). Off by default: short
    # runs and the tests would spend more compiling than it saves. A CUDA learner has its graph instead
    # (`cuda_graph`).
    compile: bool = False


def make_policy(
    cfg: SACConfig, state_dim: int, act_dim: int, cameras: tuple[str, ...] = (), image_size: int = 64
) -> GaussianPolicy:
    """The actor network alone: what actor nodes and the robot build to receive the learner's weights."""
    frozen = cfg.frozen_trunk and bool(cameras)
    encoder = ObsEncoder(state_dim, cameras, image_size, feature_dim=cfg.image_feature_dim,
                         augment_pad=cfg.augment_pad, frozen_trunk=frozen, augment_gray=cfg.augment_gray,
                         normalize_frames=cfg.normalize_frames)  # fmt: skip
    policy = GaussianPolicy(encoder, act_dim, cfg.hidden)
    if cfg.zero_init_actor:
        last = policy.head.trunk[-1]
        torch.nn.init.zeros_(last.weight)
        torch.nn.init.zeros_(last.bias)
    return policy


class Critic(nn.Module):
    """Q ensemble over (features, action) -> (n, B)."""

    def __init__(self, feat_dim: int, act_dim: int, hidden: tuple[int, ...], n: int) -> None:
        super().__init__()
        self.q = EnsembleMLP(n, feat_dim + act_dim, hidden, 1)

    def forward(self, feat: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.q(torch.cat([feat, action], dim=-1)).squeeze(-1)


class SAC(nn.Module):
    """Learner state for one SAC agent. `policy` (encoder + actor head) is the only part actors need."""

    def __init__(
        self,
        cfg: SACConfig,
        state_dim: int,
        act_dim: int,
        cameras: tuple[str, ...] = (),
        image_size: int = 64,
    ) -> None:
        super().__init__()
        if not 1 <= cfg.critic_subsample <= cfg.n_critics:
            raise ValueError(f"critic_subsample={cfg.critic_subsample} must be in [1, n_critics={cfg.n_critics}]")
        if cfg.stored_views < 1 or (cfg.stored_views > 1 and not cfg.augment_pad):
            raise ValueError(f"stored_views={cfg.stored_views} must be >= 1, and > 1 needs augment_pad > 0")
        self.cfg = cfg
        self.policy = make_policy(cfg, state_dim, act_dim, cameras, image_size)
        encoder = self.policy.encoder
        if cfg.pretrained_encoder:
            encoder.load_pretrained(cfg.pretrained_encoder)
        self.critic = Critic(encoder.out_dim, act_dim, cfg.hidden, cfg.n_critics)
        self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)
        # The policy this run started from (`Checkpoint.start` fills it), which the actor loss holds it near.
        self.anchor_head = copy.deepcopy(self.policy.head).requires_grad_(False) if cfg.anchor else None
        self.log_alpha = nn.Parameter(torch.tensor(float(cfg.init_temperature)).log())
        self.target_entropy = -cfg.target_entropy_scale * act_dim
        self.pixels = bool(cameras)
        if encoder.frozen_trunk:
            for p in encoder.trunk_params():
                p.requires_grad_(False)
        if cfg.frozen_encoder:
            encoder.requires_grad_(False)
        # The encoder is trained through the critic loss only (DrQ / SERL).
        # Fused Adam: one kernel per step instead of a dozen per tensor, where a small update is overhead-bound.
        trained = [p for p in encoder.parameters() if p.requires_grad]
        self.critic_opt = torch.optim.Adam([*self.critic.parameters(), *trained], lr=cfg.critic_lr, fused=True)
        self.actor_opt = torch.optim.Adam(self.policy.head.parameters(), lr=cfg.actor_lr, fused=True)
        self.temp_opt = torch.optim.Adam([self.log_alpha], lr=cfg.temp_lr, fused=True)
        # Data-parallel learners (loop/ranks.py) average each step's gradients across their ranks here.
        self.grad_sync: Callable[[torch.optim.Optimizer], None] | None = None
        self._bf16_on: dict[str, bool] = {}  # by device type, decided once: a compiled loss must not time matmuls
        self._losses: tuple[Callable, Callable] | None = None

    @property
    def alpha(self) -> torch.Tensor:
        return self.log_alpha.exp()

    def _precision(self) -> contextlib.AbstractContextManager:
        """bf16 autocast for the update's forward passes when `cfg.bf16` asks for it (decided on first use, where
        the learner's device is known)."""
        # No cast cache: a CUDA graph cannot hold one, and each weight is cast once per forward anyway.
        return torch.autocast(
            self.log_alpha.device.type, dtype=torch.bfloat16, enabled=self._bf16(), cache_enabled=False
        )

    def _bf16(self) -> bool:
        device = self.log_alpha.device.type
        if device not in self._bf16_on:
            if self.cfg.bf16 not in ("auto", "on", "off"):
                raise ValueError(f"bf16={self.cfg.bf16!r}: choose auto, on or off")
            self._bf16_on[device] = self.cfg.bf16 == "on" or (self.cfg.bf16 == "auto" and bf16_is_fast(device))
        return self._bf16_on[device]

    def _loss_fns(self) -> tuple[Callable, Callable]:
        """The critic and actor losses, compiled on first use where `cfg.compile` asks for it on a CPU."""
        if self._losses is None:
            self._losses = (self._critic_loss, self._actor_loss)
            if self.cfg.compile and self.log_alpha.device.type == "cpu":
                self._bf16()
                self._losses = tuple(torch.compile(f, dynamic=False) for f in self._losses)
        return self._losses

    def update(self, batches: list[Batch], actor: bool = True) -> dict[str, torch.Tensor]:
        """One critic step per batch, then (with `actor`) one actor and temperature step on the last batch's
        features.

        Stats come back as 0-d tensors on the learner's device: reading one waits for the device, and they are
        read every `log_every` env steps, not every update (`read_stats`)."""
        for batch in batches:
            critic_loss, feat, q = self._critic_step(batch)
        stats = {"critic_loss": critic_loss, "q_mean": q.mean(), "temperature": self.alpha.detach()}
        if actor:
            actor_loss, temp_loss, entropy = self._actor_step(feat.detach().float())
            stats |= {"actor_loss": actor_loss, "temp_loss": temp_loss, "entropy": entropy}
        return stats

    def _critic_step(self, b: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        loss, feat, q = self._loss_fns()[0](b)
        self._step(self.critic_opt, loss)
        with torch.no_grad():
            torch._foreach_lerp_(list(self.target_critic.parameters()), list(self.critic.parameters()), self.cfg.tau)
        return loss.detach(), feat, q.detach()

    def _critic_loss(self, b: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        cfg = self.cfg
        with torch.no_grad(), self._precision():
            next_feat = self.policy.encoder(b.next_obs, augment=self.pixels)
            next_action, next_logp = self.policy.head(next_feat)
            q_next = self.target_critic(next_feat, next_action)
            if cfg.critic_subsample < cfg.n_critics:
                idx = torch.randperm(cfg.n_critics, device=q_next.device)[: cfg.critic_subsample]
                q_next = q_next[idx]
            q_next = q_next.min(dim=0).values
            if cfg.backup_entropy:
                q_next = q_next - self.alpha * next_logp
            target = b.reward + cfg.discount * (1.0 - b.terminated) * q_next
        with self._precision():
            feat = self.policy.encoder(b.obs, augment=self.pixels)
            q = self.critic(feat, b.action)
        return (q - target.unsqueeze(0)).pow(2).mean(dim=1).sum(), feat, q

    def _actor_step(self, feat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        self.critic.requires_grad_(False)  # the actor loss must not spend time on critic weight grads
        actor_loss, logp = self._loss_fns()[1](feat)
        self.critic.requires_grad_(True)
        self._step(self.actor_opt, actor_loss)
        temp_loss = -(self.log_alpha * (logp.detach() + self.target_entropy)).mean()
        self._step(self.temp_opt, temp_loss)
        return actor_loss.detach(), temp_loss.detach(), -logp.detach().mean()

    def _step(self, opt: torch.optim.Optimizer, loss: torch.Tensor) -> None:
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if self.grad_sync is not None:
            self.grad_sync(opt)
        opt.step()

    def _actor_loss(self, feat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with self._precision():
            action, logp = self.policy.head(feat)
            q = self.critic(feat, action).mean(dim=0)
            loss = (self.alpha.detach() * logp - q).mean()
            if self.anchor_head is not None:
                drift = self.policy.head(feat, deterministic=True)[0] - self.anchor_head(feat, deterministic=True)[0]
                loss = loss + self.cfg.anchor * drift.pow(2).sum(-1).mean()
        return loss, logp

    def pretrain_trunk(self, demo: ReplayBuffer, batch_size: int = 64, lr: float = 1e-3) -> float | None:
        """Behaviour cloning of the demo actions through the camera encoders (DrQ shifts on), before their trunks
        are frozen: the features that predict the expert's action are the cube and gripper positions the critic
        needs, learned from the project's own demos (nothing downloaded). Returns the last BC loss; None when
        `pretrained_encoder` already gave the trunks."""
        enc = self.policy.encoder
        if not enc.frozen_trunk or self.cfg.pretrained_encoder:
            return None
        if not len(demo):
            raise UserError(
                "sac.frozen_trunk=true (obs=pixels' default) needs demos to pretrain the camera trunks on: give "
                "demos.path=<store> or sac.pretrained_encoder=<safetensors>, or train the encoder end to end with "
                "sac.frozen_trunk=false (a frozen random encoder learns nothing)"
            )
        probe = MLP(enc.out_dim, (256,), self.policy.act_dim).to(self.log_alpha.device)
        params = [*enc.trunk_params(), *(p for c in enc.cameras for p in enc.convs[c].head.parameters())]
        opt = torch.optim.Adam([*params, *probe.parameters()], lr=lr)
        for p in params:
            p.requires_grad_(True)
        enc.frozen_trunk = False
        try:
            for _ in range(self.cfg.trunk_pretrain_steps):
                b = demo.sample(batch_size)
                with self._precision():
                    pred = torch.tanh(probe(enc(b.obs, augment=True)))
                loss = (pred - b.action).pow(2).mean()
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
        finally:
            enc.frozen_trunk = True
            for p in enc.trunk_params():
                p.requires_grad_(False)
        return float(loss.detach())

    def store_features(self, buf: ReplayBuffer) -> None:
        """A frozen trunk's buffers hold trunk features, computed once per frame as it is stored (`stored_views`
        of them, one drawn per sample), instead of images."""
        enc, views = self.policy.encoder, self.cfg.stored_views
        enc.feature_dtype = torch.bfloat16 if self._bf16() else torch.float16
        buf.set_frame_fn(partial(enc.embed_frames, views=views), view_keys=enc.cameras if views > 1 else ())

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"critic": self.critic_opt, "actor": self.actor_opt, "temperature": self.temp_opt}
