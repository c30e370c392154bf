"""Policy tests run single-threaded: tiny models lose more to thread hand-offs than they gain."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _threads():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
