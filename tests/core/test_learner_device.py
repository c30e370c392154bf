"""The learner shaped for a GPU: no host sync inside an update, stats read lazily, replay batches sampled on the
learner's device (or gathered into pinned memory when the replay does not fit there). The sync count runs on any
machine; the `gpu` tests run where CUDA is usable."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.overrides import TorchFunctionMode

from robot_rl.algos.sac import SAC, SACConfig
from robot_rl.buffers import ReplayBuffer
from robot_rl.loop.learner import Learner
from robot_rl.types import Transition

# Tensor methods that copy a value to the host and so wait for the device; `.to` counts where it leaves a device.
HOST_READS = {"item", "tolist", "numpy", "cpu", "__bool__", "__float__", "__int__", "__index__", "__array__"}


class HostReads(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        name = getattr(func, "__name__", "")
        out = func(*args, **(kwargs or {}))
        leaves = name == "to" and isinstance(out, torch.Tensor) and out.device != args[0].device
        if name in HOST_READS or (leaves and out.device.type == "cpu"):
            self.calls.append(name)
        return out


def filled_learner(device: str = "cpu", cameras: tuple[str, ...] = (), n: int = 300, views: int = 1) -> Learner:
    """A learner over random transitions; cameras as a frozen trunk's stored features (what pixel runs train on),
    `views` of each frame."""
    cfg = SACConfig(hidden=(32, 32), n_critics=4, batch_size=64, utd=2, image_feature_dim=8, frozen_trunk=bool(cameras),
                    stored_views=views)  # fmt: skip
    sac = SAC(cfg, state_dim=5, act_dim=3, cameras=cameras, image_size=32).to(device)
    demo, online = ReplayBuffer(512, seed=0, device=device), ReplayBuffer(512, seed=1, device=device)
    if cameras:
        for buf in (demo, online):
            sac.store_features(buf)
    rng = np.random.default_rng(0)

    def obs() -> dict[str, np.ndarray]:
        o = {"state": rng.standard_normal(5).astype(np.float32)}
        o.update({c: rng.integers(0, 255, (32, 32, 3), dtype=np.uint8) for c in cameras})
        return o

    learner = Learner(sac, demo, online)
    o = obs()
    for i in range(n):
        nxt = obs()
        t = Transition(o, rng.uniform(-1, 1, 3).astype(np.float32), float(i % 7 == 0), nxt, i % 50 == 49, False,
                       intervened=i % 3 == 0)  # fmt: skip
        learner.add(t)
        o = obs() if t.done else nxt
    return learner


@pytest.mark.parametrize(("cameras", "views"), [((), 1), (("front", "wrist"), 1), (("front", "wrist"), 3)],
                         ids=["state", "frozen_trunk_features", "stored_views"])  # fmt: skip
def test_an_update_reads_nothing_back_from_the_device(cameras: tuple[str, ...], views: int) -> None:
    """Sampling, critic and actor steps, Polyak and the stats: zero host reads; a GPU then never waits for the
    host inside `train_to_rate_limit`. Reading the stats is one read for all of them."""
    learner = filled_learner(cameras=cameras, views=views)
    learner.update()  # the first update builds optimiser state
    with HostReads() as reads:
        for _ in range(3):
            learner.update()
    assert reads.calls == []
    with HostReads() as reads:
        stats = learner.last_stats
    assert len(reads.calls) == 1 and set(stats) >= {"critic_loss", "q_mean", "actor_loss", "temperature"}
    assert all(np.isfinite(v) for v in stats.values())


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_policy_weights_are_separate_host_tensors_equal_to_the_learners(device: str) -> None:
    """From a GPU one copy for all tensors, then each its own storage (safetensors refuses shared ones)."""
    learner = filled_learner(device, n=10)
    w = learner.policy_weights()
    ref = learner.algo.policy.state_dict()
    assert w.keys() == ref.keys()
    assert all(w[k].device.type == "cpu" and torch.equal(w[k], ref[k].cpu()) and w[k].dtype == ref[k].dtype for k in w)
    assert len({v.untyped_storage().data_ptr() for v in w.values()}) == len(w)


@pytest.mark.gpu
def test_replay_is_stored_and_sampled_on_the_gpu() -> None:
    learner = filled_learner("cuda", cameras=("front",), views=2)
    assert learner.online.storage.type == "cuda"
    b = learner.sampler.sample()
    assert all(v.is_cuda for v in (b.action, b.reward, *b.obs.values(), *b.next_obs.values()))
    torch.cuda.set_sync_debug_mode("error")  # any synchronising call inside an update raises
    try:
        learner.update()
    finally:
        torch.cuda.set_sync_debug_mode("default")


@pytest.mark.gpu
def test_a_replay_too_big_for_the_gpu_is_gathered_into_pinned_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (1024, 1024))
    buf = ReplayBuffer(64, seed=0, device="cuda")
    for i in range(20):
        o = {"state": np.full(3, i, np.float32)}
        buf.add(Transition(o, np.zeros(2, np.float32), 0.0, {"state": np.full(3, i + 1, np.float32)}, False, False))
    assert buf.storage.type == "cpu"
    b = buf.sample(16)
    assert b.obs["state"].is_cuda and torch.equal(b.next_obs["state"], b.obs["state"] + 1)


@pytest.mark.gpu
def test_the_critic_ensemble_stays_bf16_between_its_matmuls_under_cuda_autocast() -> None:
    from robot_rl.nets.mlp import EnsembleMLP

    net = EnsembleMLP(4, 8, (32, 32), 1).cuda()
    dtypes: list[torch.dtype] = []
    for layer in net.net:
        layer.register_forward_hook(lambda _m, _i, out: dtypes.append(out.dtype))
    with torch.autocast("cuda", dtype=torch.bfloat16):
        net(torch.randn(16, 8, device="cuda"))
    assert dtypes[:-1] == [torch.bfloat16] * (len(dtypes) - 1)


def test_critic_warmup_holds_the_actor_and_temperature() -> None:
    """`critic_warmup` updates train the critic alone; the next one moves the actor too."""
    learner = filled_learner()
    learner.critic_warmup = 2
    sac = learner.algo

    def snapshot() -> list[torch.Tensor]:
        return [p.detach().clone() for p in (*sac.policy.head.parameters(), sac.log_alpha, *sac.critic.parameters())]

    before = snapshot()
    for _ in range(2):
        learner.update()
    held = snapshot()
    n_actor = len(list(sac.policy.head.parameters())) + 1
    assert all(torch.equal(a, b) for a, b in zip(before[:n_actor], held[:n_actor], strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(before[n_actor:], held[n_actor:], strict=True))
    learner.update()
    assert not all(torch.equal(a, b) for a, b in zip(held[:n_actor], snapshot()[:n_actor], strict=True))
