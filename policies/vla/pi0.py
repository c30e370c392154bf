"""pi0 (Physical Intelligence's flow-matching VLA) behind the project's Policy interface.

The network is transformers' native `PI0ForConditionalGeneration` (pinned in the `vla` extra: its API moves
between releases): a PaliGemma VLM reads the camera images and the instruction once per chunk (its KV cache is
the prefix), and a Gemma "action expert" integrates a flow from noise (t = 1) to an action chunk (t = 0) in
`num_inference_steps` Euler steps, conditioned on the prefix and the proprio state.

The seam for noise steering (DSRL) and residual RL on a frozen VLA:

- `predict_action_chunk(obs, *, noise=None)`: `noise` (B, *noise_shape) is the flow's initial sample; the same
  noise and observation give the same chunk, bit for bit.
- `noise_shape` = (chunk_size, max_action_dim): pi0 integrates in its padded action space, so the noise has
  `max_action_dim` columns even when the robot uses fewer (the tiny configs set max_action_dim = action_dim).
- `n_action_steps`: actions executed per chunk before `select_action` re-plans (re-plan every k steps).

Observations: "state" (B, Ds) float, one (B, H, W, 3) uint8 frame per camera in `cfg.cameras`, optionally
"instruction" (a str or B strs); otherwise the instruction is `cfg.instruction` (one fixed string per task).
A leading observation-history axis (B, 1, ...) as the chunked policies use it is accepted and its last step read.
State and actions are normalised with mean/std buffers that travel in every checkpoint; actions leave in [-1, 1].
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from torch import nn
from transformers import PI0Config, PI0ForConditionalGeneration

from robot_rl.policies.base import start_noise
from robot_rl.policies.vla.preprocess import TOKENIZER_FILE, PromptTokenizer, preprocess_images
from robot_rl.types import Batch

__all__ = [
    "VLAConfig",
    "PI0Policy",
    "tiny_pi0_config",
    "full_pi0_config",
    "load_policy",
    "lerobot_to_transformers_keys",
    "pi0_config_from_lerobot",
]

FORMAT = "robot_rl.vla"
POLICY_FILE = "vla.json"
NORM_FILE = "normalization.safetensors"
ADAPTER_DIR = "adapter"


@dataclass
class VLAConfig:
    """The robot and task side of a VLA policy (the network's own sizes live in its PI0Config)."""

    instruction: str = "pick up the cube and lift it"  # used when the observation carries none
    cameras: tuple[str, ...] = ("front", "wrist")
    state_dim: int = 7  # the robot's proprio size (zero-padded to max_state_dim)
    action_dim: int = 4  # the robot's action size (the first columns of the padded chunk)
    n_action_steps: int = 4  # executed per chunk before re-planning (1 <= k <= chunk_size)
    num_inference_steps: int = 0  # flow Euler steps; 0 = the model config's (pi0: 10)
    max_text_len: int = 48  # instruction tokens incl. <bos> and "\n" (pi0's tokenizer_max_length)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> VLAConfig:
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in known}
        if "cameras" in kw:
            kw["cameras"] = tuple(kw["cameras"])
        return cls(**kw)


def tiny_pi0_config(
    *,
    chunk_size: int = 8,
    state_dim: int = 7,
    action_dim: int = 4,
    image_size: int = 32,
    patch_size: int = 8,
    width: int = 32,
    layers: int = 2,
    vocab_size: int = 259,
    num_inference_steps: int = 5,
) -> PI0Config:
    """The pi0 architecture at toy size (~90 k parameters at the defaults): for CPU tests and examples.

    vocab_size 259 matches `PromptTokenizer.byte_level()`; the image placeholder id is vocab_size (out of the
    text vocabulary, as in pi0 where it is 257152 = PaliGemma's vocab size).
    """
    gemma = dict(
        model_type="gemma",
        hidden_size=width,
        num_hidden_layers=layers,
        intermediate_size=2 * width,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=width // 2,
    )
    return PI0Config(
        vlm_config=dict(
            model_type="paligemma",
            text_config={**gemma, "vocab_size": vocab_size},
            vision_config=dict(
                model_type="siglip_vision_model",
                hidden_size=width,
                intermediate_size=2 * width,
                num_hidden_layers=layers,
                num_attention_heads=2,
                patch_size=patch_size,
                image_size=image_size,
                vision_use_head=False,
            ),
            projection_dim=width,
            image_token_id=vocab_size,
        ),
        dit_config=gemma,
        chunk_size=chunk_size,
        max_state_dim=state_dim,
        max_action_dim=action_dim,
        num_inference_steps=num_inference_steps,
    )


def full_pi0_config(chunk_size: int = 50) -> PI0Config:
    """pi0 base as released (PaliGemma 3B + Gemma 300M expert, 224 px, 32-dim padded state/action)."""
    return PI0Config(chunk_size=chunk_size)


def _last_step(x: torch.Tensor, sample_ndim: int) -> torch.Tensor:
    """Drop a (B, To, ...) observation-history axis, keeping the newest step."""
    return x[:, -1] if x.ndim == sample_ndim + 2 else x


class PI0Policy(nn.Module):
    """pi0 with our preprocessing, normalisation, chunk queue and checkpoint layout."""

    def __init__(self, model: PI0ForConditionalGeneration, tokenizer: PromptTokenizer, cfg: VLAConfig) -> None:
        super().__init__()
        mc = model.config
        if cfg.state_dim > mc.max_state_dim or cfg.action_dim > mc.max_action_dim:
            raise ValueError(
                f"state/action dims {cfg.state_dim}/{cfg.action_dim} exceed the model's padded "
                f"{mc.max_state_dim}/{mc.max_action_dim}"
            )
        if not 1 <= cfg.n_action_steps <= mc.chunk_size:
            raise ValueError(f"n_action_steps={cfg.n_action_steps} must be in [1, chunk_size={mc.chunk_size}]")
        if tokenizer.vocab_size > mc.vlm_config.text_config.vocab_size:
            raise ValueError(
                f"tokenizer has {tokenizer.vocab_size} tokens, the model's text vocabulary "
                f"{mc.vlm_config.text_config.vocab_size}"
            )
        self.model = model
        self.tokenizer = tokenizer
        self.cfg = cfg
        self.n_action_steps = cfg.n_action_steps
        vc = mc.vlm_config.vision_config
        self.image_size = int(vc.image_size)
        self.tokens_per_image = (int(vc.image_size) // int(vc.patch_size)) ** 2
        self.register_buffer("state_mean", torch.zeros(cfg.state_dim))
        self.register_buffer("state_std", torch.ones(cfg.state_dim))
        self.register_buffer("action_mean", torch.zeros(cfg.action_dim))
        self.register_buffer("action_std", torch.ones(cfg.action_dim))
        self._actions: deque[np.ndarray] = deque()
        self.finetune = "none"  # "lora" or "full" once fine-tuning is set up; decides what save() writes
        self.base_path: Path | None = None  # where the frozen base weights live (adapter checkpoints point there)

    # -- construction ------------------------------------------------------------------------------------------
    @classmethod
    def from_config(
        cls, config: PI0Config, cfg: VLAConfig, tokenizer: PromptTokenizer | None = None, seed: int | None = None
    ) -> PI0Policy:
        """Random initialisation (no weights are downloaded anywhere); the byte-level tokenizer by default."""
        if seed is not None:
            torch.manual_seed(seed)
        tok = tokenizer or PromptTokenizer.byte_level(cfg.max_text_len)
        return cls(PI0ForConditionalGeneration(config).eval(), tok, cfg)

    # -- shapes ------------------------------------------------------------------------------------------------
    @property
    def chunk_size(self) -> int:
        return int(self.model.config.chunk_size)

    @property
    def noise_shape(self) -> tuple[int, int]:
        """Per-sample shape of `noise=`: the flow's initial sample, (chunk_size, max_action_dim)."""
        return self.chunk_size, int(self.model.config.max_action_dim)

    @property
    def device(self) -> torch.device:
        return self.state_mean.device

    @property
    def queued(self) -> int:
        """Actions left before the next re-plan."""
        return len(self._actions)

    def set_normalization(
        self, state_mean: Any, state_std: Any, action_mean: Any | None = None, action_std: Any | None = None
    ) -> None:
        """Dataset statistics; a std floor keeps constant features (a fixed gripper) from blowing up."""
        for name, v, floor in (
            ("state_mean", state_mean, None),
            ("state_std", state_std, 1e-3),
            ("action_mean", action_mean, None),
            ("action_std", action_std, 1e-3),
        ):
            if v is None:
                continue
            t = torch.as_tensor(np.asarray(v), dtype=torch.float32, device=self.device)
            getattr(self, name).copy_(t.clamp_min(floor) if floor else t)

    # -- inputs ------------------------------------------------------------------------------------------------
    def _instructions(self, obs: Mapping[str, Any], batch: int, instruction: str | Sequence[str] | None) -> list[str]:
        given = instruction if instruction is not None else obs.get("instruction")
        if given is None:
            return [self.cfg.instruction] * batch
        if isinstance(given, str):
            return [given] * batch
        given = list(given)
        if len(given) != batch:
            raise ValueError(f"{len(given)} instructions for a batch of {batch}")
        return given

    def prepare_inputs(
        self, obs: Mapping[str, Any], instruction: str | Sequence[str] | None = None
    ) -> dict[str, torch.Tensor]:
        """Observation batch -> the model's keyword inputs (state padded+normalised, pixels, prompt ids)."""
        dev, dtype = self.device, self.model.dtype  # a bf16 model gets bf16 inputs
        state = _last_step(torch.as_tensor(obs["state"]), 1).to(dev, torch.float32)
        b = state.shape[0]
        state = (state - self.state_mean) / self.state_std
        state = F.pad(state, (0, self.model.config.max_state_dim - state.shape[-1])).to(dtype)
        frames = [_last_step(torch.as_tensor(obs[c]), 3).to(dev) for c in self.cfg.cameras]
        pixels = preprocess_images(frames, self.image_size).to(dtype)
        n_img = self.tokens_per_image * len(self.cfg.cameras)
        ids, mask = self.tokenizer.encode(
            self._instructions(obs, b, instruction), n_img, self.model.config.vlm_config.image_token_id, dev
        )
        return {
            "state": state,
            "input_ids": ids,
            "attention_mask": mask,
            "pixel_values": pixels,
            "pixel_attention_mask": torch.ones(b, len(self.cfg.cameras), dtype=torch.bool, device=dev),
        }

    def _low_precision(self) -> Any:
        """Autocast to the weights' dtype when they are bf16/fp16: peft keeps LoRA adapters in fp32, so without
        it fp32 adapter outputs meet bf16 base layers. Nothing for fp32 weights: an `autocast(enabled=False)`
        here would switch off the caller's autocast (vla-sft's bf16 on CUDA) and run every matmul in fp32."""
        dtype = self.model.dtype
        if dtype not in (torch.bfloat16, torch.float16):
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=dtype)

    def _unnormalize(self, padded: torch.Tensor) -> torch.Tensor:
        a = padded[..., : self.cfg.action_dim].float() * self.action_std + self.action_mean
        return a.clamp(-1.0, 1.0)

    # -- Policy protocol ---------------------------------------------------------------------------------------
    @torch.no_grad()
    def predict_full_chunk(
        self,
        obs: Mapping[str, Any],
        *,
        noise: torch.Tensor | None = None,
        deterministic: bool = False,
        instruction: str | Sequence[str] | None = None,
    ) -> torch.Tensor:
        """All chunk_size actions (B, chunk_size, action_dim) in [-1, 1]; see predict_action_chunk for noise."""
        inputs = self.prepare_inputs(obs, instruction)
        b = inputs["state"].shape[0]
        x0 = start_noise((b, *self.noise_shape), noise, deterministic, self.device, inputs["pixel_values"].dtype)
        steps = self.cfg.num_inference_steps or None
        with self._low_precision():
            padded = self.model.sample_actions(noise=x0, num_steps=steps, **inputs)
        return self._unnormalize(padded)

    def predict_action_chunk(
        self,
        obs: Mapping[str, Any],
        *,
        noise: torch.Tensor | None = None,
        deterministic: bool = False,
        instruction: str | Sequence[str] | None = None,
    ) -> torch.Tensor:
        """The executed part of a chunk, (B, n_action_steps, action_dim) in [-1, 1].

        `noise` (B, *noise_shape) is the flow's initial sample (DSRL steers it); without it the start is a fresh
        standard normal draw, or zeros when `deterministic`.
        """
        chunk = self.predict_full_chunk(obs, noise=noise, deterministic=deterministic, instruction=instruction)
        return chunk[:, : self.n_action_steps]

    @torch.no_grad()
    def select_action(
        self, obs: Mapping[str, np.ndarray], deterministic: bool = False, noise: torch.Tensor | None = None
    ) -> np.ndarray:
        """One action (action_dim,) float32; plans a chunk when the queue is empty (`noise` (1, *noise_shape)
        is used only then) and executes `n_action_steps` of it before planning again."""
        if not self._actions:
            batched = {k: (v if isinstance(v, str) else torch.as_tensor(np.asarray(v))[None]) for k, v in obs.items()}
            chunk = self.predict_action_chunk(batched, noise=noise, deterministic=deterministic)
            self._actions.extend(chunk[0].cpu().numpy().astype(np.float32))
        return self._actions.popleft()

    def reset(self) -> None:
        self._actions.clear()

    def forward(self, inputs: Mapping[str, torch.Tensor], actions: torch.Tensor) -> torch.Tensor:
        """Flow-matching loss of normalised, padded target chunks (B, chunk_size, max_action_dim).

        The loss covers only the robot's action columns: padded columns are always zero and would otherwise
        dilute the gradient by max_action_dim / action_dim. This is what DDP wraps.
        """
        b, dev = actions.shape[0], actions.device
        mc = self.model.config
        beta = torch.distributions.Beta(
            torch.tensor(mc.time_sampling_beta_alpha), torch.tensor(mc.time_sampling_beta_beta)
        )
        t = (beta.sample((b,)) * mc.time_sampling_scale + mc.time_sampling_offset).to(dev)
        noise = torch.randn_like(actions)
        x_t = t[:, None, None] * noise + (1 - t[:, None, None]) * actions
        with self._low_precision():
            out = self.model(noise=x_t.to(inputs["state"].dtype), timestep=t, **inputs)
        v = out.logits[..., : self.cfg.action_dim].float()
        target = (noise - actions)[..., : self.cfg.action_dim]
        return F.mse_loss(v, target)

    def target_chunk(self, action: torch.Tensor) -> torch.Tensor:
        """Env actions (B, T, action_dim) -> normalised, zero-padded (B, chunk_size, max_action_dim)."""
        a = (action.to(self.device, torch.float32) - self.action_mean) / self.action_std
        if a.shape[1] != self.chunk_size:
            raise ValueError(f"action windows must have chunk_size={self.chunk_size} steps, got {a.shape[1]}")
        return F.pad(a, (0, self.model.config.max_action_dim - a.shape[-1]))

    def compute_loss(self, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        """Behaviour cloning on windows: batch.obs (B, [1,] ...) and batch.action (B, chunk_size, action_dim)."""
        loss = self(self.prepare_inputs(batch.obs), self.target_chunk(batch.action))
        return loss, {"flow_mse": float(loss.detach())}

    # -- checkpoints -------------------------------------------------------------------------------------------
    def _write_common(self, path: Path, weights: str, extra: Mapping[str, Any] | None = None) -> None:
        self.tokenizer.save(path)
        norms = {k: getattr(self, k).detach().cpu().contiguous() for k in _NORM_KEYS}
        save_file(norms, str(path / NORM_FILE))
        meta = {
            "format": FORMAT,
            "backend": "pi0",
            "weights": weights,
            "base": str(self.base_path) if weights == "adapter" else None,
            "config": asdict(self.cfg),
            **(extra or {}),
        }
        (path / POLICY_FILE).write_text(json.dumps(meta, indent=1))

    def save_pretrained(self, path: str | os.PathLike[str], extra: Mapping[str, Any] | None = None) -> Path:
        """Everything, written atomically: transformers' layout (config.json + model.safetensors) plus our
        tokenizer, normalisation and vla.json. LoRA layers are merged into a copy first."""
        model = self.model
        if self.finetune == "lora":
            from robot_rl.policies.vla.lora import merged_copy

            model = merged_copy(self)
        return _atomic_dir(Path(path), lambda tmp: (model.save_pretrained(tmp), self._write_common(tmp, "full", extra)))

    def save(self, path: str | os.PathLike[str], extra: Mapping[str, Any] | None = None) -> Path:
        """A fine-tuning checkpoint: adapters only (pointing at the base weights) under LoRA, else everything."""
        if self.finetune != "lora":
            return self.save_pretrained(path, extra)
        if self.base_path is None:
            raise ValueError("an adapter checkpoint needs base_path: save the base model first")
        from robot_rl.policies.vla.lora import save_adapters

        return _atomic_dir(
            Path(path), lambda tmp: (save_adapters(self, tmp / ADAPTER_DIR), self._write_common(tmp, "adapter", extra))
        )


_NORM_KEYS = ("state_mean", "state_std", "action_mean", "action_std")


def _atomic_dir(final: Path, write: Any) -> Path:
    """Write a folder under a temp name, then swap it in: a crash leaves the previous one intact."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".{final.name}.tmp-{os.getpid()}"
    old = final.parent / f".{final.name}.old-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    write(tmp)
    if final.exists():
        os.replace(final, old)
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)
    return final


# -- loading ---------------------------------------------------------------------------------------------------


def _load_norms(policy: PI0Policy, path: Path) -> None:
    from robot_rl.errors import read_tensors

    if (path / NORM_FILE).is_file():
        n = read_tensors(path / NORM_FILE)
        policy.set_normalization(*(n[k] for k in _NORM_KEYS))


def load_policy(
    path: str | os.PathLike[str],
    cfg: VLAConfig | None = None,
    *,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    trainable: bool = False,
    tokenizer: PromptTokenizer | None = None,
    model_config: PI0Config | None = None,
) -> PI0Policy:
    """Load a pi0 policy from a local directory, whichever layout it has:

    - ours (`vla.json`): full weights in transformers' layout, or LoRA adapters over a base directory;
    - transformers' `save_pretrained` layout (`config.json` with model_type "pi0");
    - a LeRobot pi0 checkpoint (`config.json` with "type": "pi0" + `model.safetensors`).

    `cfg` overrides the stored VLAConfig (needed for the last two, which do not know our robot). The tokenizer is
    the directory's `tokenizer.json`, else the byte-level one. `trainable=True` keeps adapters trainable.
    `model_config` gives the architecture of a LeRobot checkpoint that is not the released pi0 size. `dtype` is
    the base weights'; LoRA adapters stay fp32 (peft's choice) and meet bf16 base layers under `_low_precision`.
    """
    path = Path(path)
    meta = json.loads((path / POLICY_FILE).read_text()) if (path / POLICY_FILE).is_file() else None
    if meta is not None and meta.get("weights") == "adapter":
        from robot_rl.policies.vla.lora import load_adapters

        policy = load_policy(meta["base"], cfg or VLAConfig.from_dict(meta["config"]), device=device, dtype=dtype)
        load_adapters(policy, path / ADAPTER_DIR, trainable=trainable)
        policy.base_path = Path(meta["base"])
        _load_norms(policy, path)
        return policy.to(device)
    cfg = cfg or (VLAConfig.from_dict(meta["config"]) if meta else VLAConfig())
    if tokenizer is None:
        has_tok = (path / TOKENIZER_FILE).is_file()
        tokenizer = PromptTokenizer.from_dir(path) if has_tok else PromptTokenizer.byte_level(cfg.max_text_len)
    raw = json.loads((path / "config.json").read_text())
    if raw.get("model_type") == "pi0":
        model = PI0ForConditionalGeneration.from_pretrained(path, dtype=dtype)
    elif raw.get("type") == "pi0":
        model, norms = _load_lerobot(path, raw, model_config)
    else:
        raise ValueError(f"{path}: neither a transformers nor a LeRobot pi0 checkpoint (config.json)")
    policy = PI0Policy(model.to(dtype).eval(), tokenizer, cfg)
    policy.base_path = path.resolve()
    if meta is not None:
        _load_norms(policy, path)
    elif raw.get("type") == "pi0":
        policy.set_normalization(**_fit_dims(norms, cfg))
    return policy.to(device)


# -- LeRobot pi0 checkpoints -----------------------------------------------------------------------------------
#
# LeRobot's PI0Policy keeps the network at `model.` = PI0FlowMatching: `paligemma_with_expert.paligemma` (a
# PaliGemmaForConditionalGeneration), `paligemma_with_expert.gemma_expert` (a GemmaForCausalLM) and the five
# projections. The renames below are the ones transformers' own conversion_mapping["pi0"] applies in the pinned
# release, extended to the pre-4.52 PaliGemma nesting (`paligemma.language_model.model.*`,
# `paligemma.vision_tower.vision_model.*`) that older LeRobot checkpoints carry. Hub checkpoints store the tied
# embedding only as `lm_head`, so lm_head fills embed_tokens when that is missing. Written from the two projects'
# module trees, not checked against a downloaded checkpoint (none can be fetched here).
_LEROBOT_RULES: tuple[tuple[str, str], ...] = (
    (r"^paligemma_with_expert\.paligemma\.(?:model\.)?language_model\.(?:model\.)?", "model.vlm.language_model."),
    (r"^paligemma_with_expert\.paligemma\.(?:model\.)?vision_tower\.(?:vision_model\.)?", "model.vlm.vision_tower."),
    (r"^paligemma_with_expert\.paligemma\.(?:model\.)?multi_modal_projector\.", "model.vlm.multi_modal_projector."),
    (r"^paligemma_with_expert\.gemma_expert\.model\.", "model.dit."),
    (r"^(state_proj|action_in_proj|action_time_mlp_in|action_time_mlp_out)\.", r"embed_action_time.\1."),
    (r"^action_out_proj\.", "action_out_proj."),
)
_LEROBOT_TIED = (
    (
        r"^paligemma_with_expert\.paligemma\.(?:language_model\.)?lm_head\.weight$",
        "model.vlm.language_model.embed_tokens.weight",
    ),
    (r"^paligemma_with_expert\.gemma_expert\.lm_head\.weight$", "model.dit.embed_tokens.weight"),
)
# Old LeRobot stores normalisation buffers in the same file; newer ones keep them in policy_*processor files.
_LEROBOT_NORMS = {
    "normalize_inputs.buffer_observation_state.mean": "state_mean",
    "normalize_inputs.buffer_observation_state.std": "state_std",
    "unnormalize_outputs.buffer_action.mean": "action_mean",
    "unnormalize_outputs.buffer_action.std": "action_std",
}


def lerobot_to_transformers_keys(
    sd: Mapping[str, torch.Tensor],
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """LeRobot pi0 state dict -> (transformers PI0ForConditionalGeneration state dict, normalisation stats)."""
    out: dict[str, torch.Tensor] = {}
    tied: dict[str, torch.Tensor] = {}
    norms: dict[str, torch.Tensor] = {}
    for key, v in sd.items():
        if key in _LEROBOT_NORMS:
            norms[_LEROBOT_NORMS[key]] = v
            continue
        k = key[len("model.") :] if key.startswith("model.") else key
        for pat, rep in _LEROBOT_TIED:
            if re.match(pat, k):
                tied[re.sub(pat, rep, k)] = v
                break
        else:
            for pat, rep in _LEROBOT_RULES:
                if re.match(pat, k):
                    out[re.sub(pat, rep, k)] = v
                    break
    for k, v in tied.items():
        out.setdefault(k, v)
    return out, norms


def pi0_config_from_lerobot(raw: Mapping[str, Any]) -> PI0Config:
    """LeRobot's pi0 config.json -> PI0Config (the released PaliGemma-3B / Gemma-300M sizes)."""
    variants = (raw.get("paligemma_variant", "gemma_2b"), raw.get("action_expert_variant", "gemma_300m"))
    if variants != ("gemma_2b", "gemma_300m"):
        raise ValueError(f"LeRobot pi0 variants {variants} are not the released sizes: pass model_config")
    return PI0Config(
        chunk_size=int(raw.get("chunk_size", 50)),
        max_state_dim=int(raw.get("max_state_dim", 32)),
        max_action_dim=int(raw.get("max_action_dim", 32)),
        num_inference_steps=int(raw.get("num_inference_steps", raw.get("num_steps", 10))),
    )


def _load_lerobot(
    path: Path, raw: Mapping[str, Any], model_config: PI0Config | None
) -> tuple[PI0ForConditionalGeneration, dict[str, torch.Tensor]]:
    from robot_rl.errors import read_tensors

    files = sorted(path.glob("model*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{path}: no model*.safetensors")
    sd: dict[str, torch.Tensor] = {}
    for f in files:
        sd.update(read_tensors(f))
    weights, norms = lerobot_to_transformers_keys(sd)
    model = PI0ForConditionalGeneration(model_config or pi0_config_from_lerobot(raw))
    missing, unexpected = model.load_state_dict(weights, strict=False)
    # The expert's token embedding is never read (the expert only sees action/state embeddings).
    missing = [k for k in missing if k != "model.dit.embed_tokens.weight"]
    if missing or unexpected:
        raise ValueError(f"{path}: LeRobot pi0 weights do not fit: missing {missing[:5]}, unexpected {unexpected[:5]}")
    return model, norms


def _fit_dims(norms: Mapping[str, torch.Tensor], cfg: VLAConfig) -> dict[str, torch.Tensor | None]:
    """LeRobot stats cover the robot's true dims; keep the ones our config uses, None where absent."""
    dims = {"state": cfg.state_dim, "action": cfg.action_dim}
    return {
        f"{k}_{s}": (norms[f"{k}_{s}"].flatten()[: dims[k]] if f"{k}_{s}" in norms else None)
        for k in dims
        for s in ("mean", "std")
    }
