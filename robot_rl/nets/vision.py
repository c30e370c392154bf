"""Image side of the observation: conv encoder per camera, DrQ random-shift augmentation, and the frozen-trunk mode
in which a camera frame is reduced once to its trunk features (`ObsEncoder.embed_frames`) and the learner trains
only the per-camera head on those."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import nn

from robot_rl.types import UNSCALED_FIELDS


def random_shift(images: torch.Tensor, pad: int = 4) -> torch.Tensor:
    """DrQ augmentation: shift each image by a random integer offset in [-pad, pad], replicating edges.

    images: (B, H, W, C), any dtype (uint8 here: a quarter of the bytes of float). On a CPU one slice copy per
    sample measured 1-2x faster than any single gather (and ~7x faster than advanced indexing); on a GPU the
    loop is B kernel launches and a host sync, so it is one gather there.
    """
    rows = torch.cat([images[:, :1].expand(-1, pad, -1, -1), images, images[:, -1:].expand(-1, pad, -1, -1)], 1)
    padded = torch.cat([rows[:, :, :1].expand(-1, -1, pad, -1), rows, rows[:, :, -1:].expand(-1, -1, pad, -1)], 2)
    offsets = torch.randint(0, 2 * pad + 1, (images.shape[0], 2), device=images.device)
    shift = _shift_by_slices if images.device.type == "cpu" else _shift_by_gather
    return shift(padded, offsets, images.shape[1], images.shape[2])


def random_gray(images: torch.Tensor, p: float) -> torch.Tensor:
    """Each (B, H, W, 3) uint8 image turned to its luma with probability p (SimCLR's random grayscale): a trunk
    that must also find the object without its hue leans less on the one colour it trained on. No host sync (the
    luma of every image, then a select), so it can sit inside a captured CUDA graph as `random_shift` does."""
    pick = torch.rand(images.shape[0], 1, 1, 1, device=images.device) < p
    luma = images.float() @ torch.tensor([0.299, 0.587, 0.114], device=images.device)
    return torch.where(pick, luma.round_().to(images.dtype).unsqueeze(-1), images)


def standardize(images: torch.Tensor, min_std: float = 4.0) -> torch.Tensor:
    """(B, H, W, C) uint8 -> float32, each image's channels to zero mean and unit spread over its pixels: a scene lit
    at 0.4x or exposed at 1.6x, or under a tinted light, gives nearly the frame it gives nominally, so a trunk need
    not learn brightness invariance from the draws alone. `min_std` (on 0..255) keeps a flat channel from turning
    its noise into contrast."""
    x = images.float()
    std, mean = torch.std_mean(x, (1, 2), keepdim=True)
    return x.sub_(mean).div_(std.clamp_min_(min_std))


def _shift_by_slices(padded: torch.Tensor, offsets: torch.Tensor, h: int, w: int) -> torch.Tensor:
    out = padded.new_empty((padded.shape[0], h, w, padded.shape[3]))
    for i, (dy, dx) in enumerate(offsets.tolist()):
        out[i] = padded[i, dy : dy + h, dx : dx + w]
    return out


def _shift_by_gather(padded: torch.Tensor, offsets: torch.Tensor, h: int, w: int) -> torch.Tensor:
    """All (dy, dx) windows as one strided view, (B, dy, dx, h, w * C), indexed once: no host sync."""
    b, hp, wp, c = padded.shape
    windows = padded.reshape(b, hp, wp * c).unfold(1, h, 1).unfold(2, w * c, c)
    return windows[torch.arange(b, device=padded.device), offsets[:, 0], offsets[:, 1]].view(b, h, w, c)


class ConvEncoder(nn.Module):
    """Patchify stem to a 32x32 map, two stride-2 convs, then a LayerNorm'd tanh feature vector.

    The stem's kernel = stride = image_size // 32, so the trunk costs the same at 64 and 128 px; on a
    2-core CPU the encoder is most of a pixel update, and a DrQ-style stride-1 trunk at 128 px is ~10x dearer.
    """

    def __init__(self, image_size: int, channels: int = 32, feature_dim: int = 64) -> None:
        super().__init__()
        if image_size % 32:
            raise ValueError(f"image_size must be a multiple of 32, got {image_size}")
        patch = image_size // 32
        self.trunk = nn.Sequential(
            nn.Conv2d(3, channels, patch, stride=patch),
            nn.ReLU(inplace=True),
            nn.Conv2d(channels, channels, 3, stride=2, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(channels, channels, 3, stride=2, padding=1),
            nn.ReLU(inplace=True),
        ).to(memory_format=torch.channels_last)
        self.trunk_dim = channels * 8 * 8  # what the trunk hands the head, and what a frozen trunk's frames store
        self.head = nn.Sequential(nn.Linear(self.trunk_dim, feature_dim), nn.LayerNorm(feature_dim), nn.Tanh())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.trunk(x).flatten(1))


class ObsEncoder(nn.Module):
    """Maps an observation dict to one feature vector: proprio/state concatenated with per-camera features.

    With no cameras it is the identity on `state`, so state-only SAC pays nothing for it.
    """

    def __init__(
        self,
        state_dim: int,
        cameras: Sequence[str] = (),
        image_size: int = 64,
        feature_dim: int = 64,
        augment_pad: int = 4,
        frozen_trunk: bool = False,
        augment_gray: float = 0.0,
        normalize_frames: bool = False,
    ) -> None:
        super().__init__()
        self.normalize_frames = normalize_frames
        self.cameras = tuple(cameras)
        self.augment_pad = augment_pad
        self.augment_gray = augment_gray
        self.convs = nn.ModuleDict({c: ConvEncoder(image_size, feature_dim=feature_dim) for c in self.cameras})
        self.frozen_trunk = frozen_trunk
        # What `embed_frames` stores: float16, or bfloat16 where the learner autocasts to it (`SAC.store_features`),
        # so that an update reads the features without a cast (about a fifth of a frozen-trunk update on a bf16 CPU).
        self.feature_dtype = torch.float16
        self.out_dim = state_dim + feature_dim * len(self.cameras)
        # Buffers, not parameters: they ride along in every checkpoint and weight push, so learner, eval and
        # robot node normalise identically. Centimetre-scale features need this to be learnable quickly.
        self.register_buffer("state_mean", torch.zeros(state_dim))
        self.register_buffer("state_std", torch.ones(state_dim))

    def load_pretrained(self, path: str) -> None:
        """Loads one ConvEncoder's weights (safetensors, local path: nothing is downloaded) into every camera."""
        if not self.cameras:
            raise ValueError("a pretrained image encoder was given but the observation has no cameras")
        from robot_rl.errors import read_tensors

        weights = read_tensors(path)
        for cam in self.cameras:
            try:
                self.convs[cam].load_state_dict(weights)
            except RuntimeError as e:
                raise ValueError(f"{path} does not fit the {cam} encoder: {e}") from None

    def set_state_normalization(self, states: torch.Tensor, layout: Mapping[str, Sequence[int]] | None = None,
                                min_std: float = 0.01) -> None:  # fmt: skip
        """Fixes the state normaliser from data (e.g. the demos); `min_std` keeps near-constant dims sane, and the
        columns of `UNSCALED_FIELDS` in `layout` (field -> [start, stop]; already in units) pass as they are."""
        self.state_mean.copy_(states.mean(0))
        self.state_std.copy_(states.std(0).clamp_min(min_std))
        for field in UNSCALED_FIELDS:
            if layout and field in layout:
                cols = slice(*layout[field])
                self.state_mean[cols] = 0.0
                self.state_std[cols] = 1.0

    def trunk_params(self) -> list[nn.Parameter]:
        return [p for c in self.cameras for p in self.convs[c].trunk.parameters()]

    def _trunk(self, cam: str, img: torch.Tensor, augment: bool) -> torch.Tensor:
        """(B, H, W, 3) uint8 -> (B, trunk_dim) in the autocast dtype (fp32 without autocast)."""
        if augment:
            img = self._augmented(img)
        # NHWC data viewed as NCHW is exactly channels_last: no copy before oneDNN's convolution. Under autocast
        # raw bytes go straight to its dtype: one pass over the pixels instead of uint8 -> fp32 -> bf16 (standardised
        # frames take the fp32 pass: their statistics want it).
        dev = img.device.type
        dtype = torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else torch.float32
        # Converted before the permute: one contiguous pass, where converting the strided view walks memory badly.
        x = standardize(img).to(dtype) if self.normalize_frames else img.to(dtype).mul_(1.0 / 255.0)
        return self.convs[cam].trunk(x.permute(0, 3, 1, 2)).flatten(1)

    def _augmented(self, img: torch.Tensor) -> torch.Tensor:
        img = random_shift(img, self.augment_pad) if self.augment_pad else img
        return random_gray(img, self.augment_gray) if self.augment_gray else img

    @staticmethod
    def _stored(x: torch.Tensor) -> torch.Tensor:
        """Stored features as the head computes: as they are when already in the autocast dtype, else via fp32 (a
        CPU has no fast float16 -> bfloat16 kernel: 1.4 ms at 512 x 2048 against 0.25 ms to fp32)."""
        dev = x.device.type
        if torch.is_autocast_enabled(dev) and x.dtype == torch.get_autocast_dtype(dev):
            return x
        return x.float()

    @torch.no_grad()
    def embed_frames(self, obs: Mapping[str, torch.Tensor], views: int = 1) -> dict[str, torch.Tensor]:
        """Camera images -> `feature_dtype` trunk features on the encoder's device, other keys unchanged; one frame
        (H, W, 3) -> (trunk_dim,) or a batch (B, H, W, 3) -> (B, trunk_dim).

        With a frozen trunk this runs once per frame (the replay buffer stores its output): the learner's update
        then never touches a pixel, which takes ~90 % of a pixel update's FLOPs away. `views` > 1 adds a views
        axis after the batch one, (views, trunk_dim) per frame: view 0 unshifted, the rest under random DrQ
        shifts, so that a buffer drawing one view per sample gives RL the augmentation a frozen trunk otherwise
        takes away."""
        out = dict(obs)
        for cam in self.cameras:
            img = torch.as_tensor(obs[cam]).to(self.state_mean.device, non_blocking=True)
            one = img.dim() == 3
            img = img.unsqueeze(0) if one else img
            if views > 1:
                shifted = self._augmented(img.repeat_interleave(views - 1, 0))
                img = torch.cat([img.unsqueeze(1), shifted.view(len(img), views - 1, *img.shape[1:])], 1).flatten(0, 1)
            feat = self._trunk(cam, img, augment=False).to(self.feature_dtype)
            feat = feat.view(-1, views, feat.shape[-1]) if views > 1 else feat
            out[cam] = feat[0] if one else feat
        return out

    def forward(self, obs: Mapping[str, torch.Tensor], augment: bool = False) -> torch.Tensor:
        """Cameras as (B, H, W, 3) uint8 images, or as (B, trunk_dim) features from `embed_frames`."""
        feats = [(obs["state"] - self.state_mean) / self.state_std]
        for cam in self.cameras:
            x = obs[cam]
            if x.dim() == 2:
                x = self._stored(x)
            else:
                x = self._trunk(cam, x, augment and not self.frozen_trunk)
            feats.append(self.convs[cam].head(x))
        return feats[0] if len(feats) == 1 else torch.cat(feats, dim=-1)
