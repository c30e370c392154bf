"""Machine probes: they answer within their range and honour the caps they are given; the device a run takes is
said, with why."""

import os

import pytest
import torch

from robot_rl.hardware import bf16_is_fast, fastest_threads, pick_device, torch_summary
from robot_rl.loop.run import resolve_device


def test_fastest_threads_is_a_measured_candidate_and_restores_the_setting() -> None:
    before = torch.get_num_threads()
    fastest_threads.cache_clear()
    n = fastest_threads()
    assert 1 <= n <= (os.cpu_count() or 1)
    assert n & (n - 1) == 0 or n == os.cpu_count()  # a power of two or all cores
    assert torch.get_num_threads() == before
    assert fastest_threads(1) == 1


def test_bf16_probe_answers_per_device() -> None:
    assert isinstance(bf16_is_fast("cpu"), bool)
    assert bf16_is_fast("cuda") == (torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    assert bf16_is_fast("mps") is False


# The device line a run starts with, for each way `device=auto` can land (the CUDA ones faked on any box).
TOO_OLD = (
    "The NVIDIA driver on your system is too old (found version 12040). Please update your GPU driver by "
    "downloading and installing a new version from the URL: http://www.nvidia.com/Download/index.aspx"
)


def _fake_torch(monkeypatch, cuda: str | None, available: bool, init_error: Exception | None = None) -> None:
    def init() -> None:
        if init_error is not None:
            raise init_error

    monkeypatch.setattr(torch, "__version__", "2.13.0+" + (f"cu{cuda.replace('.', '')}" if cuda else "cpu"))
    monkeypatch.setattr(torch.version, "cuda", cuda)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: available)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *_: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(torch.cuda, "init", init)


@pytest.mark.parametrize(
    ("cuda", "available", "init_error", "line", "summary"),
    [
        (None, False, None, "device: cpu (torch 2.13.0+cpu has no CUDA)", "built without CUDA: CPU only"),
        (
            "13.0", True, None, "device: cuda (NVIDIA H100 80GB HBM3, torch 2.13.0+cu130)",
            "built for CUDA 13.0: CUDA usable, NVIDIA H100 80GB HBM3",
        ),
        (
            "13.0", False, RuntimeError(TOO_OLD),
            "device: cpu (CUDA 13.0 build (torch 2.13.0+cu130) but no usable GPU: The NVIDIA driver on your system "
            "is too old (found version 12040))",
            "built for CUDA 13.0: CUDA not usable (The NVIDIA driver on your system is too old (found version 12040))",
        ),
        (
            "12.6", False, None, "device: cpu (CUDA 12.6 build (torch 2.13.0+cu126) but no usable GPU: "
            "torch.cuda.is_available() is False)",
            "built for CUDA 12.6: CUDA not usable (torch.cuda.is_available() is False)",
        ),
    ],
)  # fmt: skip
def test_auto_device_says_what_it_took_and_why(monkeypatch, capsys, cuda, available, init_error, line, summary):
    _fake_torch(monkeypatch, cuda, available, init_error)
    device = resolve_device("auto")
    assert device.type == ("cuda" if available else "cpu")
    assert capsys.readouterr().err.splitlines() == [line]
    assert torch_summary() == f"torch {torch.__version__}, {summary}"  # what ./dev prints after setup


def test_a_named_device_is_taken_as_named(monkeypatch, capsys) -> None:
    _fake_torch(monkeypatch, None, False)
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("cuda:1") == torch.device("cuda:1")
    assert capsys.readouterr().err.splitlines() == [
        "device: cpu (device=cpu)",
        "device: cuda:1 (device=cuda:1; torch 2.13.0+cpu has no CUDA)",
    ]


def test_the_device_line_on_this_box_matches_torch() -> None:
    device, why = pick_device("auto")
    assert device.type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert torch.__version__ in why
