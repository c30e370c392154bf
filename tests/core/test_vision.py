"""Image path: DrQ shift is a replicate-padded integer shift; a pretrained encoder loads from a local file; a frozen
trunk is pretrained on the demos and the learner then trains only its head on stored features, which carry DrQ
shifts into RL when `sac.stored_views` (the visual preset) asks for it."""

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from robot_rl.algos.sac import SAC, SACConfig
from robot_rl.buffers import ReplayBuffer
from robot_rl.config import load_config
from robot_rl.errors import UserError
from robot_rl.nets.vision import ConvEncoder, ObsEncoder, _shift_by_gather, _shift_by_slices, random_gray, random_shift
from robot_rl.types import Transition


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


def test_random_gray_shows_about_p_of_the_frames_as_their_luma_and_leaves_the_rest() -> None:
    torch.manual_seed(0)
    img = torch.randint(0, 256, (400, 4, 4, 3), dtype=torch.uint8)
    out = random_gray(img, 0.25)
    grey = (out == out[..., :1]).flatten(1).all(1)
    assert 0.15 < grey.float().mean() < 0.35
    luma = (img[grey].float() @ torch.tensor([0.299, 0.587, 0.114])).round().to(torch.uint8)
    assert torch.equal(out[grey][..., 0], luma) and torch.equal(out[~grey], img[~grey])


def test_the_views_a_frozen_trunk_stores_are_grey_where_augment_gray_asks() -> None:
    """`sac.augment_gray` reaches RL as `augment_pad` does: through the augmented views `embed_frames` stores."""
    enc = ObsEncoder(1, ("front",), image_size=32, augment_pad=2, frozen_trunk=True, augment_gray=1.0)
    img = torch.randint(0, 256, (8, 32, 32, 3), dtype=torch.uint8)
    seen = []
    trunk = enc._trunk
    enc._trunk = lambda cam, x, augment: seen.append(x) or trunk(cam, x, augment)
    enc.embed_frames({"front": img}, views=3)
    views = seen[0].view(8, 3, 32, 32, 3)
    assert torch.equal(views[:, 0], img)  # view 0: the frame as it is
    assert (views[:, 1:] == views[:, 1:, ..., :1]).all()  # the augmented views: grey


@pytest.mark.parametrize("normalize", [False, True], ids=["raw", "normalized"])
def test_normalized_frames_give_a_darker_tinted_scene_the_features_of_the_nominal_one(normalize: bool) -> None:
    """`sac.normalize_frames`: a per-channel gain (dim lights, exposure, white balance) leaves the trunk's features
    as they were, up to uint8 rounding; raw frames change them."""
    torch.manual_seed(0)
    enc = ObsEncoder(1, ("front",), image_size=32, normalize_frames=normalize)
    img = torch.randint(60, 200, (4, 32, 32, 3), dtype=torch.uint8)
    dim = (img.float() * torch.tensor([0.4, 0.5, 0.6])).round().to(torch.uint8)
    nominal, shifted = (enc.embed_frames({"front": x})["front"].float() for x in (img, dim))
    change = (shifted - nominal).norm() / nominal.norm()
    assert (change < 0.05) if normalize else (change > 0.15), change


def test_the_gpu_shift_gathers_what_the_cpu_loop_copies() -> None:
    """The one-gather path (CUDA's) and the per-sample loop (CPU's) give the same windows, 3 channels, uint8."""
    g = torch.Generator().manual_seed(0)
    padded = torch.randint(0, 255, (32, 24, 24, 3), dtype=torch.uint8, generator=g)
    offsets = torch.randint(0, 9, (32, 2), generator=g)
    assert torch.equal(_shift_by_gather(padded, offsets, 16, 16), _shift_by_slices(padded, offsets, 16, 16))


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


def square_demos(n: int = 200, size: int = 32, seed: int = 0) -> ReplayBuffer:
    """Frames with one bright square whose position is the expert's action: BC can only fit it by seeing."""
    rng = np.random.default_rng(seed)
    buf = ReplayBuffer(capacity=2 * n + 2, seed=seed)
    for _ in range(n):
        y, x = rng.integers(0, size - 6, 2)
        img = np.zeros((size, size, 3), np.uint8)
        img[y : y + 6, x : x + 6] = 255
        obs = {"state": np.zeros(2, np.float32), "front": img}
        action = (np.array([y, x], np.float32) / (size - 6) - 0.5) * 1.6
        buf.add(Transition(obs, action, 0.0, obs, terminated=True, truncated=False))
    return buf


@pytest.fixture
def one_thread():
    """Convolution backward at 2 threads on a shared 2-core box ran ~8x slower than at 1."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_frozen_trunk_is_pretrained_on_demos_then_only_its_head_learns(one_thread: None) -> None:
    torch.manual_seed(0)
    cfg = SACConfig(hidden=(32,), image_feature_dim=16, frozen_trunk=True, trunk_pretrain_steps=150, bf16="off")
    sac = SAC(cfg, state_dim=2, act_dim=2, cameras=("front",), image_size=32)
    enc = sac.policy.encoder
    demos = square_demos()
    with pytest.raises(UserError, match="needs demos"):
        sac.pretrain_trunk(ReplayBuffer(4))
    trunk_before = [p.clone() for p in enc.trunk_params()]
    loss = sac.pretrain_trunk(demos, batch_size=64)
    actions = demos.step["action"][torch.from_numpy(demos.valid)]
    assert loss < 0.25 * float(actions.var(0).mean())  # it learned to see the square
    assert not any(p.requires_grad for p in enc.trunk_params())
    assert any(not torch.equal(a, p) for a, p in zip(trunk_before, enc.trunk_params(), strict=True))

    raw = demos.sample(8).obs
    demos.set_frame_fn(enc.embed_frames)
    b = demos.sample(8)
    assert b.obs["front"].shape == (8, enc.convs["front"].trunk_dim)
    with torch.no_grad():  # the actor (pixels) and the learner (stored features) see the same thing
        feats = {"state": raw["state"], "front": enc.embed_frames({"front": raw["front"]})["front"]}
        assert torch.allclose(enc(raw), enc(feats), atol=1e-2)

    trunk, head = [p.clone() for p in enc.trunk_params()], [p.clone() for p in enc.convs["front"].head.parameters()]
    sac.update([b])
    assert all(torch.equal(a, p) for a, p in zip(trunk, enc.trunk_params(), strict=True))
    assert any(not torch.equal(a, p) for a, p in zip(head, enc.convs["front"].head.parameters(), strict=True))


def test_state_normaliser_fits_the_data_but_leaves_unscaled_columns_as_they_are() -> None:
    enc = SAC(SACConfig(), 6, 4).policy.encoder
    states = torch.randn(500, 6) * torch.tensor([2.0, 2.0, 2.0, 1e-4, 1e-4, 1e-4]) + 3.0
    enc.set_state_normalization(states, {"tcp_pos": [0, 3], "ee_force": [3, 6]})
    assert torch.allclose(enc.state_mean[:3], states[:, :3].mean(0)) and (enc.state_std[:3] > 1.5).all()
    assert (enc.state_mean[3:] == 0.0).all() and (enc.state_std[3:] == 1.0).all()  # not 1e-4 wide: blown up 100x


def test_the_visual_preset_augments_normalises_compiles_and_trains_on_and_the_plain_pixel_job_does_not() -> None:
    visual, pixels = load_config(["obs=pixels", "randomization=visual"]), load_config(["obs=pixels"])
    assert visual.loop.stop_at_success > 1 >= pixels.loop.stop_at_success  # the whole budget, not the nominal 0.95
    preset, plain = visual.sac, pixels.sac
    assert preset.stored_views > 1 and preset.augment_gray > 0 and preset.normalize_frames and preset.compile
    assert plain.stored_views == 1 and plain.augment_gray == 0 and not plain.normalize_frames and not plain.compile
    assert preset.augment_pad == 8 and plain.augment_pad == 4  # a wrist camera moved and turned; DrQ's own 4
    assert load_config(["obs=pixels", "randomization=visual", "sac.stored_views=1"]).sac.stored_views == 1


@pytest.mark.parametrize("views", [1, 4], ids=["off", "stored_views"])
def test_rl_batches_see_augmented_features_only_when_asked(views: int, one_thread: None) -> None:
    """A frozen trunk stores features; with `stored_views` the critic's batches hold features of shifted frames
    (obs and next obs drawn apart), without it exactly the un-augmented features of the same frames."""
    torch.manual_seed(0)
    cfg = SACConfig(hidden=(32,), image_feature_dim=16, frozen_trunk=True, stored_views=views, bf16="off")
    sac = SAC(cfg, state_dim=1, act_dim=2, cameras=("front",), image_size=32)
    enc = sac.policy.encoder
    frames = torch.randint(0, 256, (50, 32, 32, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    buf = ReplayBuffer(capacity=200, seed=0)
    for i, img in enumerate(frames.numpy()):  # a frame's id rides in its state, to find its un-augmented features
        obs = {"state": np.array([i], np.float32), "front": img}
        buf.add(Transition(obs, np.zeros(2, np.float32), 0.0, obs, terminated=True, truncated=False))
    sac.store_features(buf)
    plain = enc.embed_frames({"front": frames})["front"]

    consumed = []
    critic_step = sac._critic_step
    sac._critic_step = lambda b: consumed.append(b) or critic_step(b)
    sac.update([buf.sample(128), buf.sample(128)])
    assert len(consumed) == 2
    for b in consumed:
        ids = b.obs["state"][:, 0].long()
        moved = [(b_obs["front"].float() - plain[ids].float()).abs().amax(1) > 1e-2 for b_obs in (b.obs, b.next_obs)]
        if views == 1:
            assert not moved[0].any() and not moved[1].any()
        else:  # 3 of 4 views are shifted frames
            assert 0.5 < moved[0].float().mean() < 0.95 and 0.5 < moved[1].float().mean() < 0.95
            assert not torch.equal(b.obs["front"], b.next_obs["front"])  # the same frame, drawn apart


@pytest.mark.parametrize(("bf16", "dtype"), [("on", torch.bfloat16), ("off", torch.float16)])
def test_features_are_stored_in_the_dtype_the_learner_reads(bf16: str, dtype: torch.dtype, one_thread: None) -> None:
    """A bf16 learner stores bfloat16 features (an update then reads them uncast), an fp32 one float16; either way
    the head sees what it sees from the pixels the actor gets."""
    torch.manual_seed(0)
    cfg = SACConfig(hidden=(32,), image_feature_dim=16, frozen_trunk=True, bf16=bf16)
    sac = SAC(cfg, state_dim=1, act_dim=2, cameras=("front",), image_size=32)
    frames = torch.randint(0, 256, (20, 32, 32, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    buf = ReplayBuffer(capacity=50, seed=0)
    for img in frames.numpy():
        obs = {"state": np.zeros(1, np.float32), "front": img}
        buf.add(Transition(obs, np.zeros(2, np.float32), 0.0, obs, terminated=True, truncated=False))
    sac.store_features(buf)
    assert buf.obs["front"].dtype == dtype
    raw = {"state": torch.zeros(20, 1), "front": frames}
    with torch.no_grad():
        stored = sac.policy.encoder.embed_frames(raw)
        assert stored["front"].dtype == dtype
        assert torch.allclose(sac.policy.encoder(raw), sac.policy.encoder(stored), atol=1e-2)
    assert torch.isfinite(sac.update([buf.sample(16)])["critic_loss"])
