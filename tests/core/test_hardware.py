"""Machine probes: they answer within their range and honour the caps they are given."""

import os

import torch

from robot_rl.hardware import bf16_is_fast, fastest_threads


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
