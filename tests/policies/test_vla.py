"""pi0 VLA policy on a tiny random-init config: the noise seam, chunk queue, checkpoints (ours, transformers,
LeRobot layouts), LoRA SFT on scripted PickCube demos and adapters-only reload."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("transformers", minversion="5.23")
pytest.importorskip("peft")

from safetensors.torch import load_file, save_file  # noqa: E402

from robot_rl.policies.base import Policy  # noqa: E402
from robot_rl.policies.vla import PI0Policy, PromptTokenizer, VLAConfig, load_policy, preprocess_images  # noqa: E402
from robot_rl.policies.vla.lora import LoraSettings, apply_lora  # noqa: E402
from robot_rl.policies.vla.pi0 import tiny_pi0_config  # noqa: E402
from robot_rl.policies.vla.sft import DemoWindows, SFTConfig, train_sft  # noqa: E402

os.environ.setdefault("MUJOCO_GL", "egl")
CAMS = ("front", "wrist")
# transformers 5.23 warns about its own deprecated attribute whenever peft wraps a model
pytestmark = pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")


def tiny_policy(n_action_steps: int = 4, seed: int = 0) -> PI0Policy:
    cfg = VLAConfig(cameras=CAMS, state_dim=7, action_dim=4, n_action_steps=n_action_steps, max_text_len=32)
    return PI0Policy.from_config(tiny_pi0_config(chunk_size=8, state_dim=7, action_dim=4), cfg, seed=seed)


def obs_batch(b: int = 2, seed: int = 0, hw: tuple[int, int] = (48, 64)) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    obs = {"state": torch.randn(b, 7, generator=g)}
    for c in CAMS:
        obs[c] = torch.randint(0, 256, (b, *hw, 3), dtype=torch.uint8, generator=g)
    return obs


def noise_for(policy: PI0Policy, b: int = 2, seed: int = 1) -> torch.Tensor:
    return torch.randn(b, *policy.noise_shape, generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Six scripted PickCube episodes with 32 px front + wrist cameras (the store records the instruction)."""
    from robot_rl.demos.collect import CollectConfig, collect_to_store
    from robot_rl.demos.store import EpisodeStore
    from robot_rl.demos.teleop.scripted import ScriptedDevice

    path = tmp_path_factory.mktemp("vla") / "pick.zarr"
    with EpisodeStore(path, "w", fsync=False) as store:
        collect_to_store(CollectConfig(task="PickCube", obs="pixels", image_size=32), ScriptedDevice(), store, 6)
    return path


@pytest.fixture(scope="module")
def sft_run(demo_store: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[PI0Policy, dict, Path]:
    out = tmp_path_factory.mktemp("vla_sft")
    cfg = SFTConfig(store=str(demo_store), out=str(out), base="tiny", steps=100, val_every=50, batch_size=16,
                    lr=2e-3, lora=LoraSettings(r=8, alpha=16), seed=0)  # fmt: skip
    policy, summary = train_sft(cfg, log=lambda s: None)
    return policy, summary, out


def test_noise_seam_shapes_and_determinism() -> None:
    policy = tiny_policy()
    assert isinstance(policy, Policy)
    assert policy.noise_shape == (8, 4) and policy.n_action_steps == 4
    obs, noise = obs_batch(), noise_for(policy)
    a = policy.predict_action_chunk(obs, noise=noise)
    b = policy.predict_action_chunk(obs, noise=noise.clone())
    assert a.shape == (2, 4, 4) and torch.equal(a, b)
    assert a.abs().max() <= 1.0
    c = policy.predict_action_chunk(obs, noise=noise_for(policy, seed=2))
    assert not torch.allclose(a, c)
    full = policy.predict_full_chunk(obs, noise=noise)
    assert full.shape == (2, 8, 4) and torch.equal(full[:, :4], a)
    d1 = policy.predict_action_chunk(obs, deterministic=True)
    assert torch.equal(d1, policy.predict_action_chunk(obs, deterministic=True))
    with pytest.raises(ValueError, match="noise must have shape"):
        policy.predict_action_chunk(obs, noise=torch.zeros(2, 8, 3))
    # the instruction conditions the chunk: config default, per-call override, per-sample list in obs
    other = policy.predict_action_chunk(obs, noise=noise, instruction="push the cube to the left")
    assert not torch.allclose(a, other)
    listed = policy.predict_action_chunk(
        {**obs, "instruction": [policy.cfg.instruction, "push the cube to the left"]}, noise=noise
    )
    assert torch.equal(listed[0], a[0]) and torch.allclose(listed[1], other[1], atol=1e-6)
    # an observation-history axis (B, 1, ...) as the chunked policies pass it reads the same
    hist = {k: v[:, None] for k, v in obs.items()}
    assert torch.equal(policy.predict_action_chunk(hist, noise=noise), a)


def test_select_action_replans_every_k_steps() -> None:
    policy = tiny_policy(n_action_steps=3)
    calls = []
    inner = policy.predict_full_chunk

    def counted(*args, **kwargs):
        calls.append(kwargs.get("noise"))
        return inner(*args, **kwargs)

    policy.predict_full_chunk = counted
    one = {k: v[0].numpy() for k, v in obs_batch(1).items()}
    noise = noise_for(policy, b=1)
    acts = [policy.select_action(one, noise=noise) for _ in range(7)]
    assert len(calls) == 3 and all(a.shape == (4,) and a.dtype == np.float32 for a in acts)
    expected = policy.predict_action_chunk({k: torch.as_tensor(v)[None] for k, v in one.items()}, noise=noise)[0]
    np.testing.assert_array_equal(np.stack(acts[:3]), expected.numpy())
    assert policy.queued == 2
    policy.reset()
    assert policy.queued == 0


def test_tokenizer_and_images() -> None:
    tok = PromptTokenizer.byte_level(max_text_len=16)
    ids, mask = tok.encode(["pick_up", "x" * 40], n_image_tokens=3, image_token_id=259)
    assert ids.shape == (2, 19) and (ids[:, :3] == 259).all() and (ids[:, 3] == tok.bos_id).all()
    assert mask[0].sum() == 3 + 1 + 7 + 1 and mask[1].all()  # <bos> "pick up" "\n", then a truncated one
    assert ids[1, -1] == tok.tok.encode("\n", add_special_tokens=False).ids[-1]  # truncation keeps the newline
    px = preprocess_images([torch.full((1, 20, 40, 3), 255, dtype=torch.uint8)], 32)
    assert px.shape == (1, 1, 3, 32, 32)
    top, bottom = px[0, 0, :, :16], px[0, 0, :, 16:]  # padded black on top, the white frame below
    torch.testing.assert_close(top, torch.full_like(top, -1.0))
    torch.testing.assert_close(bottom, torch.ones_like(bottom))


def test_save_load_reproduces_outputs(tmp_path: Path) -> None:
    policy = tiny_policy()
    policy.set_normalization(np.arange(7) * 0.1, np.full(7, 2.0), np.full(4, 0.1), np.full(4, 0.5))
    obs, noise = obs_batch(), noise_for(policy)
    ref = policy.predict_full_chunk(obs, noise=noise)
    loaded = load_policy(policy.save_pretrained(tmp_path / "pi0"))
    assert loaded.cfg == policy.cfg
    torch.testing.assert_close(loaded.predict_full_chunk(obs, noise=noise), ref, rtol=0, atol=0)
    # a bare transformers save_pretrained directory, robot config and stats given by us
    policy.model.save_pretrained(tmp_path / "hf")
    bare = load_policy(tmp_path / "hf", policy.cfg)
    bare.set_normalization(policy.state_mean, policy.state_std, policy.action_mean, policy.action_std)
    torch.testing.assert_close(bare.predict_full_chunk(obs, noise=noise), ref, rtol=0, atol=0)


def _to_lerobot(sd: dict[str, torch.Tensor], old: bool) -> dict[str, torch.Tensor]:
    """Our weights under LeRobot's PI0Policy key names (new: transformers>=4.52 PaliGemma nesting)."""
    pg = "model.paligemma_with_expert.paligemma."
    lm, vt, mm = (
        ("language_model.model.", "vision_tower.vision_model.", "multi_modal_projector.")
        if old
        else ("model.language_model.", "model.vision_tower.vision_model.", "model.multi_modal_projector.")
    )
    out = {}
    for k, v in sd.items():
        if k == "model.vlm.language_model.embed_tokens.weight":  # hub files keep only the tied lm_head
            out[pg + ("language_model.lm_head.weight" if old else "lm_head.weight")] = v
        elif k.startswith("model.vlm.language_model."):
            out[pg + lm + k.removeprefix("model.vlm.language_model.")] = v
        elif k.startswith("model.vlm.vision_tower."):
            out[pg + vt + k.removeprefix("model.vlm.vision_tower.")] = v
        elif k.startswith("model.vlm.multi_modal_projector."):
            out[pg + mm + k.removeprefix("model.vlm.multi_modal_projector.")] = v
        elif k == "model.dit.embed_tokens.weight":
            continue  # LeRobot drops the expert's unused token embedding
        elif k.startswith("model.dit."):
            out["model.paligemma_with_expert.gemma_expert.model." + k.removeprefix("model.dit.")] = v
        else:
            out["model." + k.removeprefix("embed_action_time.")] = v
    return out


@pytest.mark.parametrize("old", [False, True], ids=["lerobot-new", "lerobot-old"])
def test_lerobot_checkpoint_loads(tmp_path: Path, old: bool) -> None:
    policy = tiny_policy()
    obs, noise = obs_batch(), noise_for(policy)
    sd = _to_lerobot({k: v.contiguous() for k, v in policy.model.state_dict().items()}, old)
    stats = {"state": (torch.linspace(-1, 1, 7), torch.full((7,), 3.0)), "action": (torch.zeros(4), torch.ones(4))}
    sd["normalize_inputs.buffer_observation_state.mean"], sd["normalize_inputs.buffer_observation_state.std"] = stats[
        "state"
    ]
    sd["unnormalize_outputs.buffer_action.mean"], sd["unnormalize_outputs.buffer_action.std"] = stats["action"]
    (tmp_path / "config.json").write_text(json.dumps({"type": "pi0", "chunk_size": 8, "n_action_steps": 8}))
    save_file(sd, str(tmp_path / "model.safetensors"))
    loaded = load_policy(tmp_path, policy.cfg, model_config=policy.model.config)
    policy.set_normalization(*stats["state"], *stats["action"])
    torch.testing.assert_close(
        loaded.predict_full_chunk(obs, noise=noise), policy.predict_full_chunk(obs, noise=noise), rtol=0, atol=0
    )


def test_lora_only_adapters_trainable() -> None:
    policy = apply_lora(tiny_policy(), LoraSettings(r=4))
    trainable = [n for n, p in policy.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert any("vlm.language_model" in n for n in trainable) and any("model.dit." in n for n in trainable)
    assert not any("vision_tower" in n for n in trainable)
    assert any("action_out_proj" in n for n in trainable)


def linear_output_dtypes(policy: PI0Policy, run: Callable[[], object]) -> set[torch.dtype]:
    """The dtypes of every nn.Linear output inside the model (base layers and LoRA's A/B) while `run()` runs."""
    seen: set[torch.dtype] = set()
    hooks = [
        m.register_forward_hook(lambda _m, _i, out: seen.add(out.dtype))
        for m in policy.model.modules()
        if isinstance(m, torch.nn.Linear)
    ]
    try:
        run()
    finally:
        for h in hooks:
            h.remove()
    return seen


def flow_loss(policy: PI0Policy) -> torch.Tensor:
    act = torch.rand(2, policy.chunk_size, 4, generator=torch.Generator().manual_seed(3)) * 2 - 1
    return policy(policy.prepare_inputs(obs_batch()), policy.target_chunk(act))


def test_outer_autocast_reaches_fp32_base_layers() -> None:
    """vla-sft's CUDA path: fp32 master weights with LoRA under the trainer's bf16 autocast. The policy must not
    switch that autocast off, or every matmul runs in fp32."""
    policy = apply_lora(tiny_policy(), LoraSettings(r=4)).train()
    assert policy.model.dtype == torch.float32
    losses = []

    def step() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            losses.append(flow_loss(policy))

    assert linear_output_dtypes(policy, step) == {torch.bfloat16}
    losses[0].backward()
    grads = [p.grad for n, p in policy.named_parameters() if "lora_B" in n and p.grad is not None]
    assert grads and all(g.dtype == torch.float32 and torch.isfinite(g).all() for g in grads)


def test_bf16_weights_autocast_their_fp32_lora_adapters() -> None:
    """A bf16 base with peft's fp32 adapters and no outer autocast: the policy autocasts to the weights' dtype,
    so adapter outputs meet the base layers in bf16, and the adapters still train."""
    policy = tiny_policy()
    policy.model.to(torch.bfloat16)
    policy = apply_lora(policy, LoraSettings(r=4)).train()
    lora = {n: p for n, p in policy.named_parameters() if "lora_" in n}
    assert lora and all(p.dtype == torch.float32 for p in lora.values())
    losses = []
    assert linear_output_dtypes(policy, lambda: losses.append(flow_loss(policy))) == {torch.bfloat16}
    assert torch.isfinite(losses[0])
    losses[0].backward()
    grads = [p.grad for n, p in lora.items() if "lora_B" in n and p.grad is not None]  # None: off the loss path
    assert grads and all(torch.isfinite(g).all() for g in grads) and any(g.abs().sum() > 0 for g in grads)
    chunk = policy.eval().predict_full_chunk(obs_batch(), noise=noise_for(policy))
    assert chunk.dtype == torch.float32 and torch.isfinite(chunk).all()


def test_windows_carry_episode_instruction(demo_store: Path) -> None:
    data = DemoWindows(demo_store, CAMS, chunk_size=8, val_fraction=0.34)
    assert len(data.train.episodes) == 4 and len(data.val.episodes) == 2
    obs, act = data.batch(data.train, np.arange(5))
    assert obs["instruction"] == ["pick up the cube and lift it"] * 5
    assert obs["front"].shape == (5, 1, 32, 32, 3) and act.shape == (5, 8, 4)


def test_lora_sft_lowers_validation_loss(sft_run: tuple[PI0Policy, dict, Path]) -> None:
    policy, summary, out = sft_run
    vals = [h["val_loss"] for h in summary["history"]]
    assert vals[-1] < 0.8 * vals[0], vals
    assert summary["trainable_params"] < summary["total_params"] / 2


def test_sft_leaves_base_unchanged_and_adapter_checkpoint_reloads(sft_run: tuple[PI0Policy, dict, Path]) -> None:
    policy, summary, out = sft_run
    ckpt = Path(summary["checkpoint"])
    meta = json.loads((ckpt / "vla.json").read_text())
    assert meta["weights"] == "adapter" and Path(meta["base"]) == (out / "base").resolve()
    adapter = load_file(str(ckpt / "adapter" / "adapter_model.safetensors"))
    assert adapter and all("lora_" in k for k in adapter)
    assert not (ckpt / "model.safetensors").exists()
    # the frozen base weights are bit-identical to the saved base
    base = load_policy(out / "base")
    tuned = dict(policy.model.named_parameters())
    for n, p in base.model.named_parameters():
        layer, leaf = n.rsplit(".", 1)  # peft moves a targeted layer's own weight to <layer>.base_layer.<leaf>
        assert torch.equal(p, tuned.get(n, tuned.get(f"{layer}.base_layer.{leaf}"))), n
    obs = obs_batch(hw=(32, 32))
    noise = noise_for(policy)
    reloaded = load_policy(ckpt)
    ref = policy.predict_full_chunk(obs, noise=noise)
    torch.testing.assert_close(reloaded.predict_full_chunk(obs, noise=noise), ref, rtol=0, atol=0)
    assert not torch.allclose(base.predict_full_chunk(obs, noise=noise), ref)
    # merged full export reproduces the adapted policy too
    merged = load_policy(policy.save_pretrained(out / "merged"))
    torch.testing.assert_close(merged.predict_full_chunk(obs, noise=noise), ref, rtol=1e-5, atol=1e-5)


def test_full_finetune_checkpoint(demo_store: Path, tmp_path: Path) -> None:
    cfg = SFTConfig(store=str(demo_store), out=str(tmp_path), finetune="full", steps=3, val_every=3, batch_size=4,
                    grad_accum=2, warmup_steps=1)  # fmt: skip
    policy, summary = train_sft(cfg, log=lambda s: None)
    assert summary["trainable_params"] == summary["total_params"]
    ckpt = Path(summary["checkpoint"])
    assert json.loads((ckpt / "vla.json").read_text())["weights"] == "full"
    obs, noise = obs_batch(hw=(32, 32)), noise_for(policy)
    torch.testing.assert_close(
        load_policy(ckpt).predict_full_chunk(obs, noise=noise), policy.predict_full_chunk(obs, noise=noise)
    )


def test_cli_entry(demo_store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from robot_rl.cli import main

    rc = main(["vla-sft", str(demo_store), "--out", str(tmp_path), "--steps", "2", "--val-every", "2",
               "--batch-size", "4", "--chunk-size", "4", "--n-action-steps", "2",
               "--instruction", "lift the red cube"])  # fmt: skip
    assert rc == 0 and capsys.readouterr().out.strip().endswith(str(tmp_path / "checkpoints" / "final"))
    policy = load_policy(tmp_path / "checkpoints" / "final")
    assert policy.noise_shape == (4, 4) and policy.n_action_steps == 2 and policy.finetune == "lora"
    assert policy.cfg.instruction == "lift the red cube"
    assert json.loads((tmp_path / "summary.json").read_text())["steps"] == 2
