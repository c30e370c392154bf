"""The one error type the CLI reports as a single line (exit code 2) instead of a traceback.

Raise `UserError` for a problem with what the person asked for or pointed us at (arguments, config values,
stores, checkpoints, run dirs); everything else is a bug and keeps its traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


class UserError(Exception):
    """A mistake in the request or its inputs; the message alone must tell the person what to fix."""

    def one_line(self) -> str:
        return " ".join(str(self).split())


class ConfigError(UserError, ValueError):
    """A training config key, group, type or value that cannot work."""


def read_tensors(path: Path | str, device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """safetensors' `load_file` for every file a person hands us (weights, optimiser state, classifiers): a damaged,
    truncated or missing file is a UserError that names it (a half-copied run dir, not a bug)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(path), device=str(device))
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except (SafetensorError, OSError) as e:
        raise UserError(f"{path}: damaged or truncated checkpoint file ({' '.join(str(e).split())})") from None
