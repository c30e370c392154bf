"""`./dev torch-choice`: the torch build ./dev would install, from a fake nvidia-smi or none, installing nothing."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

DEV = Path(__file__).resolve().parents[2] / "dev"
INDEX = "https://download.pytorch.org/whl"

# The top of what nvidia-smi prints: the driver's version and the newest CUDA it runs (echo: a shell builtin).
SMI = """#!/bin/sh
echo 'Wed Nov 26 18:45:02 2025'
echo '+-----------------------------------------------------------------------------------------+'
echo '| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: {cuda}     |'
echo '|-----------------------------------------+------------------------+----------------------+'
"""


def torch_choice(tmp_path: Path, smi: str | None, override: str | None = None) -> subprocess.CompletedProcess:
    """Runs `./dev torch-choice` with PATH holding only dirname (the script's one outside command) and, if given,
    an nvidia-smi script; the real one, where the box has it, stays out of sight."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "dirname").symlink_to(shutil.which("dirname"))
    if smi is not None:
        (bin_dir / "nvidia-smi").write_text(smi)
        (bin_dir / "nvidia-smi").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "ROBOT_RL_TORCH"} | {"PATH": str(bin_dir)}
    if override is not None:
        env["ROBOT_RL_TORCH"] = override
    return subprocess.run(
        [shutil.which("bash"), str(DEV), "torch-choice"], env=env, capture_output=True, text=True, timeout=10
    )


@pytest.mark.parametrize(
    ("driver_cuda", "variant"),
    [
        (None, "cpu"),  # no driver
        ("11.8", "cpu"),  # older than every CUDA build of torch 2.13: said on stderr
        ("12.4", "cu126"),  # CUDA's minor-version compatibility within 12.x
        ("12.9", "cu126"),
        ("13.0", "cu130"),
        ("13.2", "cu130"),  # 13.2 is experimental for torch 2.13: asked for, not picked
    ],
)
def test_the_build_follows_the_driver(tmp_path: Path, driver_cuda: str | None, variant: str) -> None:
    r = torch_choice(tmp_path, None if driver_cuda is None else SMI.format(cuda=driver_cuda))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [f"torch==2.13.0+{variant}", "--extra-index-url", f"{INDEX}/{variant}"]
    assert r.stderr.startswith(f"torch 2.13.0+{variant}: ")


def test_a_driver_that_does_not_answer_gets_the_cpu_build(tmp_path: Path) -> None:
    r = torch_choice(tmp_path, "#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate'\nexit 9\n")
    assert r.stdout.split()[0] == "torch==2.13.0+cpu"
    assert "nvidia-smi names no CUDA version" in r.stderr


def test_the_override_wins_and_nonsense_is_refused(tmp_path: Path) -> None:
    r = torch_choice(tmp_path, SMI.format(cuda="12.4"), override="cu132")
    assert r.stdout.split() == ["torch==2.13.0+cu132", "--extra-index-url", f"{INDEX}/cu132"]
    r = torch_choice(tmp_path / "cpu", SMI.format(cuda="13.0"), override="cpu")
    assert r.stdout.split()[0] == "torch==2.13.0+cpu"
    bad = torch_choice(tmp_path / "bad", None, override="gpu")
    assert bad.returncode == 2 and bad.stdout == ""
    assert "ROBOT_RL_TORCH=gpu" in bad.stderr
