"""`robot-rl collect --teleop keyboard` driven through a pseudo-terminal, key by key, as a person would: start gate,
keep, discard, re-record and Ctrl-C (keep the stopped episode)."""

from __future__ import annotations

import os
import pty
import re
import select
import sys
import time
from pathlib import Path

from robot_rl.demos.store import EpisodeStore


class Terminal:
    """The child's controlling terminal: what it printed so far, and keys typed into it."""

    def __init__(self, argv: list[str]) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: the pty is its stdin/stdout/stderr and controlling terminal
            os.execve(sys.executable, [sys.executable, "-m", "robot_rl.cli", *argv], os.environ)
        self.text, self.seen = "", 0

    def expect(self, pattern: str, timeout: float = 60.0) -> str:
        """Waits for `pattern` in output printed after the last match; returns the match."""
        deadline = time.time() + timeout
        while (m := re.search(pattern, self.text[self.seen :])) is None:
            assert time.time() < deadline, f"no {pattern!r} in:\n{self.text[-3000:]}"
            if select.select([self.fd], [], [], 0.2)[0]:
                try:
                    self.text += os.read(self.fd, 4096).decode(errors="replace")
                except OSError:  # the child closed the terminal
                    raise AssertionError(f"exited before {pattern!r}:\n{self.text[-3000:]}") from None
        self.seen += m.end()
        return m.group(0)

    def type(self, keys: str) -> None:
        os.write(self.fd, keys.encode())

    def wait(self) -> int:
        while True:
            try:
                chunk = os.read(self.fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            self.text += chunk.decode(errors="replace")
        return os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])


def test_keyboard_collection_as_a_person_drives_it(tmp_path: Path) -> None:
    store = tmp_path / "kb.zarr"
    os.environ.setdefault("MUJOCO_GL", "egl")
    t = Terminal(["collect", str(store), "-n", "3", "--teleop", "keyboard", "--obs", "state", "--no-fsync"])
    banner = t.expect(r"keys: [^\n]*Ctrl-C stop")
    assert "intervene" not in banner and "y success" in banner and "r re-record" in banner

    t.expect(r"episode 1/3 \(seed 0\): \[enter\] start")
    time.sleep(1.0)
    assert "step" not in t.text[t.seen :]  # nothing runs before the person starts it
    t.type("\r")
    t.expect(r"step +\d+/600  tcp [-+]\d")  # live readout, a human-length episode (60 s at 10 Hz)
    t.type("www")
    t.expect(r"step +[3-9]/600")
    t.type("y")  # label: success, ends the episode
    t.expect(r"episode done \(\d+ steps, success\): \[k\] keep  \[d\] discard  \[r\] re-record")
    t.type("k")

    t.expect(r"episode 2/3 \(seed 1\)")
    t.type("\r")
    t.expect(r"step +\d+/600")
    t.type("n")
    t.expect(r"episode done \(\d+ steps, no success\)")
    t.type("d")  # discard: seed 1 is not stored

    t.expect(r"episode 2/3 \(seed 2\)")
    t.type("\r")
    t.expect(r"step +\d+/600")
    t.type("n")
    t.expect(r"episode done")
    t.type("r")  # re-record: seed 2 again

    t.expect(r"episode 2/3 \(seed 2\)")
    t.type("\r")
    t.expect(r"step +[2-9]/600")
    t.type("\x03")  # Ctrl-C, as typed: the terminal sends SIGINT
    t.expect(r"stopped at \(\d+ steps, no success\): \[k\] keep  \[d\] discard")
    t.type("k")
    rc = t.wait()
    assert rc == 0, t.text[-3000:]
    assert "Traceback" not in t.text and "collected 2 episodes" in t.text

    with EpisodeStore(store) as st:
        metas = [st.meta(i) for i in range(len(st))]
    assert [m["seed"] for m in metas] == [0, 2]
    assert metas[0]["success"] and metas[0]["success_label"] == "operator"
    assert metas[1].get("interrupted") and metas[1]["length"] >= 2
