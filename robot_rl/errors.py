"""The one error type the CLI reports as a single line (exit code 2) instead of a traceback.

Raise `UserError` for a problem with what the person asked for or pointed us at (arguments, config values,
stores, checkpoints, run dirs); everything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class UserError(Exception):
    """A mistake in the request or its inputs; the message alone must tell the person what to fix."""

    def one_line(self) -> str:
        return " ".join(str(self).split())


class ConfigError(UserError, ValueError):
    """A training config key, group, type or value that cannot work."""
