"""Choices that depend on the machine a job runs on, made by measuring it at start-up rather than assumed.

"All cores" and "fp32" were assumptions that did not hold on the 2-core dev box: there a shared second core made
the learner slower, and bf16 matmuls ran 4x faster than fp32 (AVX512-BF16). Each probe costs well under a second.
"""

from __future__ import annotations

import functools
import os
import statistics
import time

import torch
from torch import nn


def cuda_status() -> tuple[bool, str]:
    """(True, the GPU's name) where CUDA is usable, else (False, why not).

    `is_available()` alone only says no: a CPU build, a driver older than the build's CUDA and a container without
    the GPU all read False (the driver's complaint is warned once per process, often before anyone looks).
    """
    if torch.version.cuda is None:
        return False, "no CUDA in this build"
    if torch.cuda.is_available():
        return True, torch.cuda.get_device_name()
    try:
        torch.cuda.init()  # raises the reason again, each time it is asked
    except Exception as e:  # RuntimeError from the driver, AssertionError from torch's own checks
        lines = str(e).strip().splitlines()
        return False, lines[0].split(". ")[0].rstrip(".") if lines else type(e).__name__
    return False, "torch.cuda.is_available() is False"


def _cuda_words(usable: bool, detail: str) -> str:
    if usable:
        return f"{detail}, torch {torch.__version__}"
    if torch.version.cuda is None:
        return f"torch {torch.__version__} has no CUDA"
    return f"CUDA {torch.version.cuda} build (torch {torch.__version__}) but no usable GPU: {detail}"


def pick_device(name: str = "auto") -> tuple[torch.device, str]:
    """The device `device=<name>` means here, and why: `auto` is the GPU where CUDA is usable, else the CPU."""
    if name != "auto":
        device = torch.device(name)
        return device, f"device={name}" + (f"; {_cuda_words(*cuda_status())}" if device.type == "cuda" else "")
    usable, detail = cuda_status()
    return torch.device("cuda" if usable else "cpu"), _cuda_words(usable, detail)


def torch_summary() -> str:
    """One line on the torch installed: its version, the CUDA it was built for, and whether that CUDA runs here."""
    if torch.version.cuda is None:
        return f"torch {torch.__version__}, built without CUDA: CPU only"
    usable, detail = cuda_status()
    status = f"CUDA usable, {detail}" if usable else f"CUDA not usable ({detail})"
    return f"torch {torch.__version__}, built for CUDA {torch.version.cuda}: {status}"


def _rate(fn: object, reps: int) -> float:
    t = time.perf_counter()
    for _ in range(reps):
        fn()  # type: ignore[operator]
    return reps / (time.perf_counter() - t)


@functools.cache
def bf16_is_fast(device_type: str = "cpu") -> bool:
    """Whether bfloat16 beats fp32 here by enough to autocast the learner (>= 1.5x).

    CPUs without native bf16 emulate it and run it slower than fp32; a GPU running a critic-sized network is
    bound by kernel launches, where autocast's casts only add work. So this is timed, not looked up."""
    if device_type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported() and _cuda_bf16_speedup() >= 1.5
    if device_type != "cpu":
        return False
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        a32, b32 = torch.randn(256, 256), torch.randn(256, 256)
        a16, b16 = a32.bfloat16(), b32.bfloat16()
        fp32, bf16 = [], []
        for _ in range(3):  # interleaved rounds, median: other jobs may share the cores
            fp32.append(_rate(lambda: torch.mm(a32, b32), 30))
            bf16.append(_rate(lambda: torch.mm(a16, b16), 30))
        return statistics.median(bf16) >= 1.5 * statistics.median(fp32)
    finally:
        torch.set_num_threads(threads)


def _cuda_bf16_speedup() -> float:
    """bf16 / fp32 rate of a learner-shaped step on the GPU (batch 512), interleaved rounds, medians."""
    steps = {bf16: _learner_like_step("cuda", bf16) for bf16 in (False, True)}
    rates: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(3):
        for bf16, step in steps.items():
            rates[bf16].append(_rate(step, 30))
    return statistics.median(rates[True]) / statistics.median(rates[False])


def _learner_like_step(device: str = "cpu", bf16: bool | None = None, width: int = 256, batch: int = 512) -> object:
    """Forward + backward of a LayerNorm MLP at a critic's size: the learner's mix of GEMMs and memory-bound ops,
    in bf16 where the learner will run it (`None`: as `bf16_is_fast` says for the CPU). Waits for a GPU."""
    net = nn.Sequential(
        nn.Linear(20, width), nn.LayerNorm(width), nn.ReLU(), nn.Linear(width, width), nn.LayerNorm(width), nn.ReLU(),
        nn.Linear(width, 1),
    ).to(device)  # fmt: skip
    x = torch.randn(batch, 20, device=device)
    enabled = bf16_is_fast("cpu") if bf16 is None else bf16

    def step() -> None:
        net.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=enabled):
            y = net(x)
        y.float().sum().backward()
        if device == "cuda":
            torch.cuda.synchronize()

    return step


@functools.cache
def fastest_threads(max_threads: int = 0) -> int:
    """The intra-op thread count at which a learner-shaped step runs fastest in wall-clock, right now.

    Candidates are 1, 2, 4, ... up to the cores (or `max_threads`); rounds are interleaved and medians taken so
    a neighbour's burst does not decide, and each round lasts tens of milliseconds so a busy core gets the chance
    to show (short probes saw 2 threads win while real updates ran 5x slower at 2 than at 1 on the shared dev
    box). More threads must win by 20 %: each one is also a core taken from whatever else runs there.
    """
    cores = max_threads or os.cpu_count() or 1
    candidates = sorted({min(2**i, cores) for i in range(cores.bit_length() + 1)})
    if len(candidates) == 1:
        return 1
    before = torch.get_num_threads()
    step = _learner_like_step()
    rates: dict[int, list[float]] = {n: [] for n in candidates}
    try:
        for _ in range(5):
            for n in candidates:
                torch.set_num_threads(n)
                step()  # warm the pool at this size
                rates[n].append(_rate(step, 30))
    finally:
        torch.set_num_threads(before)
    best = 1
    for n in candidates[1:]:
        if statistics.median(rates[n]) >= 1.2 * statistics.median(rates[best]):
            best = n
    return best
