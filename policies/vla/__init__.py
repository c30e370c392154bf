"""Vision-language-action policies (pi0 through transformers) and their supervised fine-tuning.

Needs the `vla` extra (`pip install -e ".[vla]"`): transformers (exact pin) and peft.
"""

from robot_rl.policies.vla.lora import LoraSettings, apply_lora, load_adapters, save_adapters
from robot_rl.policies.vla.pi0 import PI0Policy, VLAConfig, full_pi0_config, load_policy, tiny_pi0_config
from robot_rl.policies.vla.preprocess import PromptTokenizer, preprocess_images

__all__ = [
    "PI0Policy",
    "VLAConfig",
    "tiny_pi0_config",
    "full_pi0_config",
    "load_policy",
    "LoraSettings",
    "apply_lora",
    "save_adapters",
    "load_adapters",
    "PromptTokenizer",
    "preprocess_images",
]
