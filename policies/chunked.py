"""Behaviour-cloned action-chunk policies: a diffusion policy and an MLP baseline, one config, one base class.

Shape vocabulary (diffusion_policy): To = `n_obs_steps` observations in, a `horizon`-step chunk predicted,
Ta = `n_action_steps` of it executed, starting at the last observed step. Observations passed to
`predict_action_chunk` carry the time axis: state (B, To, Ds), cameras (B, To, H, W, 3) uint8.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from diffusers import DDIMScheduler, DDPMScheduler
from torch import nn

from robot_rl.nets import MLP, ObsEncoder
from robot_rl.policies.base import Obs, start_noise
from robot_rl.types import Batch


@dataclass
class ChunkPolicyConfig:
    kind: str = "diffusion"  # diffusion | mlp (the BC baseline: regresses the chunk directly)
    horizon: int = 8  # predicted steps per chunk (0.8 s at 10 Hz)
    n_obs_steps: int = 2  # observations the chunk is conditioned on
    n_action_steps: int = 4  # executed before re-planning (<= horizon - n_obs_steps + 1)
    hidden: tuple[int, ...] = (256, 256)  # observation MLP (and the whole net for kind=mlp)
    image_feature_dim: int = 64
    # U-Net widths: (32, 64) samples a chunk well within a control period on one CPU core and trains there in
    # minutes (`bench/run.py --only steering` times it); diffusion_policy's (256, 512, 1024) is for GPUs.
    down_dims: tuple[int, ...] = (32, 64)
    kernel_size: int = 3
    step_embed_dim: int = 64
    num_train_timesteps: int = 100
    num_inference_steps: int = 10  # DDIM steps at sampling time
    beta_schedule: str = "squaredcos_cap_v2"


class ChunkPolicy(nn.Module):
    """Owns the observation history and the action queue; subclasses map stacked obs to a chunk."""

    def __init__(self, cfg: ChunkPolicyConfig, state_dim: int, act_dim: int, cameras: Sequence[str], image_size: int):
        super().__init__()
        if not 1 <= cfg.n_action_steps <= cfg.horizon - cfg.n_obs_steps + 1:
            raise ValueError(
                f"n_action_steps={cfg.n_action_steps} must be in [1, horizon - n_obs_steps + 1 = "
                f"{cfg.horizon - cfg.n_obs_steps + 1}]"
            )
        self.cfg = cfg
        self.act_dim = act_dim
        self.n_action_steps = cfg.n_action_steps
        self.encoder = ObsEncoder(state_dim, cameras, image_size, feature_dim=cfg.image_feature_dim, augment_pad=0)
        self.cond_dim = self.encoder.out_dim * cfg.n_obs_steps
        self._obs_history: deque[Mapping[str, np.ndarray]] = deque(maxlen=cfg.n_obs_steps)
        self._actions: deque[np.ndarray] = deque()

    @property
    def noise_shape(self) -> tuple[int, int]:
        """What `noise=` must be per sample: the initial sample of the generative process, (horizon, Da)."""
        return self.cfg.horizon, self.act_dim

    def condition(self, obs: Obs) -> torch.Tensor:
        """(B, To, ...) observations -> (B, To * F) features."""
        b, to = obs["state"].shape[:2]
        flat = {k: v.flatten(0, 1) for k, v in obs.items() if k in ("state", *self.encoder.cameras)}
        return self.encoder(flat).reshape(b, to * self.encoder.out_dim)

    def _executed(self, chunk: torch.Tensor) -> torch.Tensor:
        start = self.cfg.n_obs_steps - 1
        return chunk[:, start : start + self.n_action_steps].clamp(-1.0, 1.0)

    def reset(self) -> None:
        self._obs_history.clear()
        self._actions.clear()

    @property
    def queued(self) -> int:
        """Actions left before the next re-plan."""
        return len(self._actions)

    @torch.no_grad()
    def select_action(
        self, obs: Mapping[str, np.ndarray], deterministic: bool = False, noise: torch.Tensor | None = None
    ) -> np.ndarray:
        """`noise` (1, horizon, Da) is used only when this call plans a new chunk."""
        self._obs_history.append(obs)
        while len(self._obs_history) < self.cfg.n_obs_steps:  # episode start: repeat the first frame
            self._obs_history.appendleft(self._obs_history[0])
        if not self._actions:
            device = self.encoder.state_mean.device
            stacked = {
                k: torch.as_tensor(np.stack([o[k] for o in self._obs_history])).unsqueeze(0).to(device)
                for k in ("state", *self.encoder.cameras)
            }
            chunk = self.predict_action_chunk(stacked, noise=noise, deterministic=deterministic)
            self._actions.extend(chunk[0].cpu().numpy())
        return self._actions.popleft()


class MLPChunkPolicy(ChunkPolicy):
    """BC baseline: an MLP regresses the whole chunk (no sampling, so `noise` is ignored)."""

    def __init__(self, cfg: ChunkPolicyConfig, state_dim: int, act_dim: int, cameras: Sequence[str], image_size: int):
        super().__init__(cfg, state_dim, act_dim, cameras, image_size)
        self.net = MLP(self.cond_dim, cfg.hidden, cfg.horizon * act_dim, layernorm=True)

    def forward_chunk(self, obs: Obs) -> torch.Tensor:
        return torch.tanh(self.net(self.condition(obs))).reshape(-1, self.cfg.horizon, self.act_dim)

    def predict_action_chunk(
        self, obs: Obs, *, noise: torch.Tensor | None = None, deterministic: bool = False
    ) -> torch.Tensor:
        return self._executed(self.forward_chunk(obs))

    def compute_loss(self, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        loss = nn.functional.mse_loss(self.forward_chunk(batch.obs), batch.action)
        return loss, {"bc_mse": float(loss.detach())}


class SinusoidalEmbedding(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        half = self.dim // 2
        freqs = torch.exp(torch.arange(half, device=t.device) * (-math.log(10_000.0) / (half - 1)))
        args = t.float()[:, None] * freqs[None]
        return torch.cat([args.sin(), args.cos()], dim=-1)


def _conv_block(c_in: int, c_out: int, k: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv1d(c_in, c_out, k, padding=k // 2), nn.GroupNorm(8, c_out), nn.Mish())


class ConditionalResBlock(nn.Module):
    """Two conv blocks with FiLM (scale, shift) from the diffusion step + observation condition."""

    def __init__(self, c_in: int, c_out: int, cond_dim: int, k: int) -> None:
        super().__init__()
        self.block1, self.block2 = _conv_block(c_in, c_out, k), _conv_block(c_out, c_out, k)
        self.film = nn.Sequential(nn.Mish(), nn.Linear(cond_dim, 2 * c_out))
        self.skip = nn.Conv1d(c_in, c_out, 1) if c_in != c_out else nn.Identity()

    def forward(self, x: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        scale, shift = self.film(cond).unsqueeze(-1).chunk(2, dim=1)
        h = self.block1(x) * (1 + scale) + shift
        return self.block2(h) + self.skip(x)


class ConditionalUnet1D(nn.Module):
    """diffusion_policy's temporal U-Net: (B, T, Da) noisy chunk + step + global condition -> (B, T, Da)."""

    def __init__(self, act_dim: int, cond_dim: int, down_dims: Sequence[int], k: int, step_dim: int) -> None:
        super().__init__()
        self.step_embed = nn.Sequential(
            SinusoidalEmbedding(step_dim),
            nn.Linear(step_dim, 4 * step_dim),
            nn.Mish(),
            nn.Linear(4 * step_dim, step_dim),
        )
        c = step_dim + cond_dim
        dims = [act_dim, *down_dims]
        self.down = nn.ModuleList()
        for i, (d_in, d_out) in enumerate(zip(dims[:-1], dims[1:], strict=True)):
            last = i == len(down_dims) - 1
            down = nn.Identity() if last else nn.Conv1d(d_out, d_out, 3, stride=2, padding=1)
            self.down.append(
                nn.ModuleList([ConditionalResBlock(d_in, d_out, c, k), ConditionalResBlock(d_out, d_out, c, k), down])
            )
        mid = down_dims[-1]
        self.mid = nn.ModuleList([ConditionalResBlock(mid, mid, c, k), ConditionalResBlock(mid, mid, c, k)])
        self.up = nn.ModuleList()
        for d_out, d_in in zip(reversed(down_dims[:-1]), reversed(down_dims[1:]), strict=True):
            up = nn.ConvTranspose1d(d_out, d_out, 4, stride=2, padding=1)  # every level down is undone here
            self.up.append(
                nn.ModuleList([ConditionalResBlock(2 * d_in, d_out, c, k), ConditionalResBlock(d_out, d_out, c, k), up])
            )
        self.final = nn.Sequential(_conv_block(down_dims[0], down_dims[0], k), nn.Conv1d(down_dims[0], act_dim, 1))

    def forward(self, x: torch.Tensor, t: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        c = torch.cat([self.step_embed(t.expand(x.shape[0])), cond], dim=-1)
        h = x.transpose(1, 2)
        skips = []
        for res1, res2, down in self.down:
            h = res2(res1(h, c), c)
            skips.append(h)
            h = down(h)
        for res in self.mid:
            h = res(h, c)
        for res1, res2, up in self.up:
            h = res2(res1(torch.cat([h, skips.pop()], dim=1), c), c)
            h = up(h)
        return self.final(h).transpose(1, 2)


class DiffusionPolicy(ChunkPolicy):
    """Trained with a diffusers DDPM scheduler (epsilon prediction), sampled with DDIM (eta = 0): the initial
    noise fully determines the chunk, which is the seam noise-space RL (DSRL) steers through."""

    def __init__(self, cfg: ChunkPolicyConfig, state_dim: int, act_dim: int, cameras: Sequence[str], image_size: int):
        super().__init__(cfg, state_dim, act_dim, cameras, image_size)
        if cfg.horizon % 2 ** (len(cfg.down_dims) - 1):
            raise ValueError(f"horizon={cfg.horizon} must be divisible by 2^(len(down_dims)-1)")
        self.obs_mlp = MLP(self.cond_dim, cfg.hidden, layernorm=True, activation=nn.Mish)
        self.unet = ConditionalUnet1D(act_dim, self.obs_mlp.out_dim, cfg.down_dims, cfg.kernel_size, cfg.step_embed_dim)
        self.train_scheduler = DDPMScheduler(
            num_train_timesteps=cfg.num_train_timesteps,
            beta_schedule=cfg.beta_schedule,
            clip_sample=True,
            prediction_type="epsilon",
        )
        self.sample_scheduler = DDIMScheduler.from_config(self.train_scheduler.config)
        self.sample_scheduler.set_timesteps(cfg.num_inference_steps)

    def predict_action_chunk(
        self, obs: Obs, *, noise: torch.Tensor | None = None, deterministic: bool = False
    ) -> torch.Tensor:
        """`noise` (B, horizon, Da) is the DDIM start sample; `deterministic` starts from zeros, the mode-seeking
        choice for evaluation; otherwise a fresh standard normal sample."""
        cond = self.obs_mlp(self.condition(obs))
        sample = start_noise((cond.shape[0], *self.noise_shape), noise, deterministic, cond.device, cond.dtype)
        sched = self.sample_scheduler
        for t in sched.timesteps:
            eps = self.unet(sample, t.to(cond.device), cond)
            sample = sched.step(eps, t, sample, eta=0.0).prev_sample
        return self._executed(sample)

    def compute_loss(self, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        actions = batch.action  # (B, horizon, Da) in [-1, 1]
        cond = self.obs_mlp(self.condition(batch.obs))
        noise = torch.randn_like(actions)
        t = torch.randint(0, self.cfg.num_train_timesteps, (actions.shape[0],), device=actions.device)
        noisy = self.train_scheduler.add_noise(actions, noise, t)
        loss = nn.functional.mse_loss(self.unet(noisy, t, cond), noise)
        return loss, {"diffusion_loss": float(loss.detach())}


def make_chunk_policy(
    cfg: ChunkPolicyConfig, state_dim: int, act_dim: int, cameras: Sequence[str] = (), image_size: int = 64
) -> ChunkPolicy:
    kinds = {"diffusion": DiffusionPolicy, "mlp": MLPChunkPolicy}
    if cfg.kind not in kinds:
        raise ValueError(f"unknown chunk policy kind {cfg.kind!r}; expected one of {sorted(kinds)}")
    return kinds[cfg.kind](cfg, state_dim, act_dim, cameras, image_size)
