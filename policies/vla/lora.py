"""LoRA on pi0 through peft: which layers get adapters, saving and loading adapters alone.

Adapters go on every attention and MLP projection of both language models (the PaliGemma VLM and the Gemma
action expert) and on the five small state/action projections, so a new robot's action space can be learned
with nothing but LoRA weights trainable. The SigLIP vision tower stays frozen unless `vision=True` (openpi's
LoRA recipes also leave it alone). peft injects the adapter layers in place, so `policy.model` stays the same
PI0ForConditionalGeneration and `sample_actions` keeps working.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from peft import LoraConfig, PeftModel, get_peft_model
from transformers import PI0ForConditionalGeneration

if TYPE_CHECKING:  # pi0 imports this module (lazily, to save and load adapters): types only, no circle
    from robot_rl.policies.vla.pi0 import PI0Policy

__all__ = ["LoraSettings", "apply_lora", "save_adapters", "load_adapters", "merged_copy", "lora_targets"]

_LM = r"model\.(?:vlm\.language_model|dit)\.layers\.\d+\.(?:self_attn\.[qkvo]_proj|mlp\.(?:gate|up|down)_proj)"
_VISION = (
    r"model\.vlm\.(?:vision_tower\.encoder\.layers\.\d+\.(?:self_attn\.(?:[qkv]_proj|out_proj)|mlp\.fc[12])"
    r"|multi_modal_projector\.linear)"
)
_HEADS = r"embed_action_time\.(?:state_proj|action_in_proj|action_time_mlp_in|action_time_mlp_out)|action_out_proj"


@dataclass
class LoraSettings:
    r: int = 16  # rank; openpi's gemma_2b_lora uses 16 for the VLM and 32 for the expert
    alpha: float = 16.0  # scale = alpha / r
    dropout: float = 0.0
    vision: bool = False  # adapters on SigLIP and the projector too
    heads: bool = True  # adapters on the state/action projections (else they stay frozen)


def lora_targets(s: LoraSettings) -> str:
    """peft target_modules regex (full match against module names)."""
    parts = [_LM] + ([_VISION] if s.vision else []) + ([_HEADS] if s.heads else [])
    return "(?:" + "|".join(parts) + ")"


def _peft(policy: PI0Policy) -> PeftModel:
    pm = policy.__dict__.get("_peft")
    if pm is None:
        raise ValueError("this policy has no LoRA adapters")
    return pm


def _attach(policy: PI0Policy, pm: PeftModel) -> None:
    # Not registered as a submodule: the PeftModel wraps the very modules policy.model already owns, and
    # registering it would list every parameter twice in state_dict().
    policy.__dict__["_peft"] = pm
    policy.finetune = "lora"


def apply_lora(policy: PI0Policy, s: LoraSettings) -> PI0Policy:
    """Freeze every base weight and add trainable LoRA adapters (in place)."""
    cfg = LoraConfig(r=s.r, lora_alpha=s.alpha, lora_dropout=s.dropout, target_modules=lora_targets(s), bias="none")
    _attach(policy, get_peft_model(policy.model, cfg))
    return policy


def save_adapters(policy: PI0Policy, path: Path) -> None:
    """adapter_config.json + adapter_model.safetensors (peft's format; nothing of the base model)."""
    _peft(policy).save_pretrained(str(path))


def load_adapters(policy: PI0Policy, path: Path, trainable: bool = False) -> PI0Policy:
    """Put saved adapters on a freshly loaded base policy (in place).

    Not `PeftModel.from_pretrained`: in the pinned versions peft re-applies transformers' LeRobot->pi0 key
    conversion to adapter keys, renaming `embed_action_time.state_proj` a second time, and silently drops
    those adapters. The adapter file's keys are plain `base_model.model.<module>.lora_A.weight`.
    """
    from robot_rl.errors import read_tensors

    cfg = LoraConfig.from_pretrained(str(path))
    cfg.inference_mode = not trainable
    _attach(policy, get_peft_model(policy.model, cfg))
    weights = {}
    for k, v in read_tensors(Path(path) / "adapter_model.safetensors").items():
        k = k.removeprefix("base_model.model.")
        weights[re.sub(r"\.(lora_[AB])\.weight$", r".\1.default.weight", k)] = v
    missing, unexpected = policy.model.load_state_dict(weights, strict=False)
    missing = [k for k in missing if "lora_" in k]
    if missing or unexpected:
        raise ValueError(f"{path}: adapters do not fit: missing {missing[:5]}, unexpected {unexpected[:5]}")
    if not trainable:
        policy.model.eval()
    return policy


def merged_copy(policy: PI0Policy) -> PI0ForConditionalGeneration:
    """A plain PI0ForConditionalGeneration with the adapters folded into the weights (the policy is untouched)."""
    return copy.deepcopy(_peft(policy)).merge_and_unload()
