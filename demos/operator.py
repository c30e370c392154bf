"""The person at the terminal while `robot-rl collect` records with a human device: a start gate before each
episode, a keep / discard / re-record verdict after it, a one-line live readout while driving, and a Ctrl-C
that stops the episode in flight instead of killing the process (the operator then says whether to keep it).

Prompts read single keys from the same terminal the keyboard device reads; the terminal is in cbreak mode for
the whole session (no echo, no Enter needed, Ctrl-C still raises SIGINT), and type-ahead is flushed before each
prompt so a motion key still auto-repeating from the episode never answers one.
"""

from __future__ import annotations

import os
import select
import signal
import sys
from types import FrameType
from typing import TextIO

from robot_rl.errors import UserError

__all__ = ["Operator"]


class Operator:
    """Use as a context manager around a collection session; `stop_requested` is what the episode loop polls."""

    def __init__(self, fd: int | None = None, out: TextIO | None = None) -> None:
        self.fd = sys.stdin.fileno() if fd is None else fd
        self.out = out or sys.stderr
        self.stop_requested = False
        self._saved_tty: list | None = None
        self._saved_sigint = None

    def __enter__(self) -> Operator:
        import termios
        import tty

        if not os.isatty(self.fd):
            raise UserError("a human teleop device needs an interactive terminal on stdin for its prompts")
        self._saved_tty = termios.tcgetattr(self.fd)
        tty.setcbreak(self.fd)
        self._saved_sigint = signal.signal(signal.SIGINT, self._on_sigint)
        return self

    def __exit__(self, *exc: object) -> None:
        import termios

        signal.signal(signal.SIGINT, self._saved_sigint)
        if self._saved_tty is not None:
            termios.tcsetattr(self.fd, termios.TCSADRAIN, self._saved_tty)

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        self.stop_requested = True

    def say(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()

    def readout(self, line: str) -> None:
        """Overwrites the current terminal line (step, TCP, gripper ... while driving)."""
        self.out.write("\r" + line + "\x1b[K")
        self.out.flush()

    def ask(self, prompt: str, keys: dict[str, str]) -> str:
        """Waits for one of `keys` (key -> answer) and returns its answer; Ctrl-C answers "quit"."""
        import termios

        termios.tcflush(self.fd, termios.TCIFLUSH)  # before the prompt shows: a key typed after it must count
        self.out.write("\n" + prompt + " ")
        self.out.flush()
        self.stop_requested = False
        while not self.stop_requested:
            if not select.select([self.fd], [], [], 0.1)[0]:
                continue
            for ch in os.read(self.fd, 64).decode(errors="replace"):
                key = "enter" if ch in "\r\n" else ch.lower()
                if key in keys:
                    self.say(key)
                    return keys[key]
        self.stop_requested = False
        self.say("Ctrl-C")
        return "quit"
