"""Image path: DrQ shift is a replicate-padded integer shift; a pretrained encoder loads from a local file."""

import pytest
import torch
from safetensors.torch import save_file

from robot_rl.algos.sac import SAC, SACConfig
from robot_rl.nets.vision import ConvEncoder, random_shift


def test_random_shift_is_an_integer_translation_with_replicated_edges() -> None:
    torch.manual_seed(0)
    img = torch.arange(16 * 16, dtype=torch.int32).view(1, 16, 16, 1).repeat(64, 1, 1, 1)
    out = random_shift(img, pad=3)
    assert out.shape == img.shape and out.dtype == img.dtype
    for b in range(64):
        dy = int(out[b, 8, 8, 0] // 16 - 8)
        dx = int(out[b, 8, 8, 0] % 16 - 8)
        assert -3 <= dy <= 3 and -3 <= dx <= 3
        rows = (torch.arange(16) + dy).clamp(0, 15)
        cols = (torch.arange(16) + dx).clamp(0, 15)
        assert torch.equal(out[b, :, :, 0], img[0, rows][:, cols, 0])
    assert len({tuple(out[b, 8, 8].tolist()) for b in range(64)}) > 5  # shifts differ per sample


def test_pretrained_encoder_is_loaded_into_every_camera(tmp_path) -> None:
    enc = ConvEncoder(64, feature_dim=16)
    path = tmp_path / "enc.safetensors"
    save_file({k: v.contiguous() for k, v in enc.state_dict().items()}, str(path))
    cfg = SACConfig(image_feature_dim=16, pretrained_encoder=str(path))
    sac = SAC(cfg, state_dim=3, act_dim=2, cameras=("front", "wrist"), image_size=64)
    for cam in ("front", "wrist"):
        for k, v in enc.state_dict().items():
            assert torch.equal(sac.policy.encoder.convs[cam].state_dict()[k], v)
    with pytest.raises(ValueError, match="does not fit"):
        SAC(SACConfig(image_feature_dim=8, pretrained_encoder=str(path)), 3, 2, ("front",), 64)
