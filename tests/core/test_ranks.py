"""Learner ranks (loop/ranks.py) on gloo, two real processes: they start from the lead's weights whatever their own
seed drew, keep equal weights through every update, and each learns from the other's shard."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from robot_rl.algos.sac import SAC, SACConfig
from robot_rl.buffers import ReplayBuffer
from robot_rl.commands.train import node_config
from robot_rl.config import load_config
from robot_rl.errors import ConfigError, UserError
from robot_rl.loop.learner import Learner
from robot_rl.loop.ranks import Ranks, rank_config
from robot_rl.types import Batch

CFG = SACConfig(hidden=(32, 32), critic_lr=3e-3, tau=0.05, init_temperature=1e-4, temp_lr=0.0, bf16="off")
UPDATES = 300


def shard(reward: float, n: int = 64) -> Batch:
    """One state and action, a terminal reward: a critic trained on it alone fits Q = `reward`."""
    s = torch.zeros(n, 3)
    return Batch(obs={"state": s}, action=torch.zeros(n, 2), reward=torch.full((n,), reward), next_obs={"state": s},
                 terminated=torch.ones(n), intervened=torch.zeros(n))  # fmt: skip


def q_of(sac: SAC) -> float:
    b = shard(0.0, 1)
    with torch.no_grad():
        return sac.critic(b.obs["state"], b.action).mean().item()


def rank_main(rank: int, port: int, out: Path, synced: bool) -> None:
    os.environ |= {"RANK": str(rank), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    torch.set_num_threads(1)
    torch.manual_seed(rank)  # each rank draws its own initial weights
    sac = SAC(CFG, state_dim=3, act_dim=2)
    learner = Learner(sac, ReplayBuffer(8), ReplayBuffer(8))
    learner.env_steps = 100 * (1 - rank)  # the lead's counters win too
    ranks = Ranks(2, torch.device("cpu"))
    if synced:
        ranks.start_alike(sac, learner, seed=0)
    start = {k: v.clone() for k, v in sac.state_dict().items()}
    data = shard(2.0 * rank)  # rank 0's shard says Q = 0, rank 1's says Q = 2
    for _ in range(UPDATES):
        sac.update([data])
    torch.save({"start": start, "end": sac.state_dict(), "q": q_of(sac), "env_steps": learner.env_steps},
               out / f"rank{rank}.pt")  # fmt: skip
    ranks.close()


def run_ranks(tmp_path: Path, synced: bool) -> list[dict]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(rank_main, args=(port, tmp_path, synced), nprocs=2, start_method="fork")
    return [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]


def test_ranks_start_from_the_leads_weights_stay_equal_and_learn_from_each_others_shard(tmp_path: Path) -> None:
    lead, other = run_ranks(tmp_path, synced=True)
    for k in lead["start"]:
        assert torch.equal(lead["start"][k], other["start"][k]), k
        assert torch.equal(lead["end"][k], other["end"][k]), k  # bit for bit after every averaged step
    assert lead["env_steps"] == other["env_steps"] == 100
    assert abs(lead["q"] - 1.0) < 0.2, lead["q"]  # the mean of the two shards' Q


def test_without_averaging_each_rank_fits_only_its_own_shard(tmp_path: Path) -> None:
    """The control: the same two processes, gradients not averaged, fit Q = 0 and Q = 2 apart."""
    lead, other = run_ranks(tmp_path, synced=False)
    assert abs(lead["q"]) < 0.2 and abs(other["q"] - 2.0) < 0.2, (lead["q"], other["q"])


def trunk_main(rank: int, port: int, out: Path, same_seed: bool) -> None:
    """Camera agents with frozen trunks, drawn from the same seed (as `rank_config` keeps the lead's) or not."""
    os.environ |= {"RANK": str(rank), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    torch.set_num_threads(1)
    torch.manual_seed(0 if same_seed else rank)
    sac = SAC(SACConfig(hidden=(16,), frozen_trunk=True, bf16="off"), 3, 2, cameras=("front",), image_size=32)
    ranks = Ranks(2, torch.device("cpu"))
    try:
        ranks.start_alike(sac, Learner(sac, ReplayBuffer(8), ReplayBuffer(8)), seed=0)
        (out / f"rank{rank}.txt").write_text("started")
    except UserError as e:
        (out / f"rank{rank}.txt").write_text(str(e))
    ranks.close()


@pytest.mark.parametrize("same_seed", [True, False])
def test_ranks_with_frozen_trunks_start_only_when_their_trunks_are_the_leads(tmp_path: Path, same_seed: bool) -> None:
    """Replay holds a frozen trunk's features: ranks whose trunks differ would train on another trunk's features,
    so they refuse in one line; the same seed draws the same trunk and they start."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(trunk_main, args=(port, tmp_path, same_seed), nprocs=2, start_method="fork")
    said = [(tmp_path / f"rank{r}.txt").read_text() for r in range(2)]
    assert said == ["started"] * 2 if same_seed else all("different camera trunks" in x for x in said), said


@pytest.mark.parametrize("wrong", [["distributed.learners=2", "distributed.plane=ros2"], ["distributed.learners=0"]])
def test_ranks_off_the_zenoh_plane_or_below_one_are_refused_at_load(wrong: list[str]) -> None:
    with pytest.raises(ConfigError, match="distributed.learners"):
        node_config(load_config(wrong))


def test_only_the_lead_rank_refits_the_classifier(tmp_path: Path) -> None:
    """The lead's actors pay by the lead's classifier: other ranks neither build refits nor need the verdicts."""
    refits = [
        "reward.source=classifier",
        "reward.classifier_path=c.safetensors",
        "reward.refit_every=25",
        "intervention.device=simulated",
    ]
    cfg = load_config(["robot=sim", *refits, f"run_dir={tmp_path}"])
    assert cfg.reward.refit_every == 25 and rank_config(cfg, 1).reward.refit_every == 0
