"""Several learners as torch.distributed ranks (`distributed.learners`, issue #56).

Data-parallel SAC: every rank holds the same agent and trains on its own replay shard (the transitions of the
actors whose `--index` modulo the ranks is its rank), and each optimiser step averages the ranks' gradients first,
so the weights stay equal on every rank (DDP's rule; its module wrapper cannot follow SAC's three optimisers over a
shared encoder). The effective batch is `learners x sac.batch_size` at the run's UTD. Rank 0, the lead, is the run:
evaluations, checkpoints, weights to the actors, the stopping rule; the other ranks only take data and train.

They train in rounds: each rank takes in what its actors sent, the ranks sum the steps they took (every rank counts
the fleet's steps, so every rank owes the same updates), all run those updates, then the lead walks its run through
the new steps (logs, checkpoints, evaluations at their multiples) and says whether it is done. A rank that dies
breaks the collective: the lead exits with an error and `launch` resumes it from its checkpoint, ranks and all
(each rank saves its shard in `<run>/rank<r>/checkpoints` at the lead's checkpoint steps and resumes from it).

gloo on CPUs, NCCL on GPUs. `robot-rl learner distributed.learners=N` starts ranks 1..N-1 on this machine; across
machines `torchrun` starts them (its RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from robot_rl.algos.sac import SAC
from robot_rl.config import TrainConfig
from robot_rl.errors import UserError
from robot_rl.loop.actor import EpisodeStats
from robot_rl.loop.learner import Learner
from robot_rl.loop.run import actor_counts, take_episodes
from robot_rl.loop.trainer import TrainingRun


class Ranks:
    """This process's place among the learner ranks; `world` 1 is a lone learner and does nothing here."""

    def __init__(self, world: int, device: torch.device) -> None:
        given = int(os.environ.get("WORLD_SIZE", world))
        if given != world:
            raise UserError(f"distributed.learners={world} but WORLD_SIZE={given}: give torchrun as many ranks")
        self.rank, self.world, self.device = int(os.environ.get("RANK", 0)), world, device
        if world > 1 and not dist.is_initialized():
            dist.init_process_group("nccl" if device.type == "cuda" else "gloo")

    @property
    def lead(self) -> bool:
        return self.rank == 0

    def start_alike(self, algo: SAC, learner: Learner, seed: int) -> None:
        """The lead's weights, optimiser state and counters on every rank, then each rank's own sampling (`seed`
        and its rank). A frozen camera trunk must already be the lead's: the frames in replay are its features."""
        enc = algo.policy.encoder
        trunk = enc.trunk_params() if enc.frozen_trunk else []
        own = [p.detach().clone() for p in trunk]
        for t in itertools.chain(algo.parameters(), algo.buffers()):
            dist.broadcast(t.data, 0)
        differs = self._tensor([int(any(not torch.equal(a, b) for a, b in zip(own, trunk, strict=True)))])
        dist.all_reduce(differs)
        if differs.item():
            raise UserError("learner ranks pretrained different camera trunks, so their replay holds different "
                            "features: start the run from init_from=<run>, or give sac.frozen_trunk=false")  # fmt: skip
        states = [opt.state_dict() for opt in algo.optimizers().values()]
        dist.broadcast_object_list(states, 0)
        for opt, state in zip(algo.optimizers().values(), states, strict=True):
            opt.load_state_dict(state)
        counts = self._tensor([learner.env_steps, learner.sim_steps, learner.updates])
        dist.broadcast(counts, 0)
        learner.env_steps, learner.sim_steps, learner.updates = counts.tolist()
        if not self.lead:
            torch.manual_seed(seed + self.rank)
            for i, buf in enumerate((learner.demo, learner.online)):
                buf.rng = np.random.default_rng([seed, self.rank, i])
        algo.grad_sync = self.average_grads
        learner._graphed = None  # eager updates: a CUDA graph here would have to capture the NCCL all-reduces

    def average_grads(self, opt: torch.optim.Optimizer) -> None:
        grads = [p.grad for group in opt.param_groups for p in group["params"] if p.grad is not None]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)
        flat /= self.world
        parts = flat.split([g.numel() for g in grads])
        torch._foreach_copy_(grads, [f.view_as(g) for f, g in zip(parts, grads, strict=True)])

    def exchange(self, counts: list[int], can_sample: bool, done: bool) -> tuple[list[int], bool, bool]:
        """Every rank's `counts` summed; whether every rank can sample a batch; whether the lead is `done`."""
        t = self._tensor([*counts, int(not can_sample), int(done and self.lead)])
        dist.all_reduce(t)
        *summed, cannot, lead_done = t.tolist()
        return summed, cannot == 0, lead_done > 0

    def gather(self, part: dict) -> dict:
        """Every rank's `part` merged, on every rank."""
        parts: list[dict] = [{}] * self.world
        dist.all_gather_object(parts, part)
        return {k: v for p in parts for k, v in p.items()}

    def _tensor(self, values: list[int]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.int64, device=self.device)

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


def pin_device(world: int) -> int:
    """This process's rank; on a GPU box each rank of a machine takes its own card (LOCAL_RANK), before the run
    puts anything on "cuda"."""
    if world > 1 and torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    return int(os.environ.get("RANK", 0)) if world > 1 else 0


def rank_config(cfg: TrainConfig, rank: int) -> TrainConfig:
    """A rank other than the lead: its own folder in the run, the lead's demos and seed (a frozen trunk pretrains
    alike; `start_alike` then reseeds the sampling), no evaluations; its checkpoints hold its shard, at the lead's
    steps, for a resume; no classifier refits (the lead's actors pay by the lead's)."""
    lead_dir = Path(cfg.resume or cfg.run_dir)
    loop = dataclasses.replace(cfg.loop, eval_every=0, eval_at_start=False, final_eval_episodes=0)
    reward = dataclasses.replace(cfg.reward, refit_every=0)
    demos = cfg.demos
    if not demos.path and cfg.robot is None:  # the lead collected them before it started this rank
        demos = dataclasses.replace(demos, path=str(lead_dir / "demos.zarr"))
    rank_dir = str(lead_dir / f"rank{rank}")
    return dataclasses.replace(cfg, run_dir=rank_dir, resume=rank_dir, loop=loop, demos=demos, reward=reward)


def spawn_ranks(world: int, overrides: list[str]) -> list[subprocess.Popen]:
    """Ranks 1..`world`-1 of a learner started without torchrun, on this machine: this process is rank 0."""
    if "WORLD_SIZE" in os.environ or world == 1:
        return []
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ |= {"RANK": "0", "WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    # The lead's thread count: a frozen trunk then pretrains to the same bits on every rank (`start_alike`).
    cmd = [sys.executable, "-m", "robot_rl.cli", "learner", *overrides, f"threads={torch.get_num_threads()}"]
    return [subprocess.Popen(cmd, env={**os.environ, "RANK": str(r), "LOCAL_RANK": str(r)}) for r in range(1, world)]


def stop(children: list[subprocess.Popen]) -> None:
    """The ranks this learner started, once it ends (each also ends when the lead's collective breaks)."""
    for p in children:
        if p.poll() is None:
            p.terminate()
    for p in children:
        try:
            p.wait(timeout=30.0)
        except subprocess.TimeoutExpired:
            p.kill()


def follow(run: TrainingRun, link, ranks: Ranks) -> Path:  # noqa: ANN001
    """A rank other than the lead, until the lead is done (or Ctrl-C, which reaches the lead too)."""
    try:
        learn_in_ranks(run, link, EpisodeStats(), ranks, publish=None)
    except KeyboardInterrupt:
        pass
    run.close()
    return run.run_dir


def learn_in_ranks(run: TrainingRun, link, stats: EpisodeStats, ranks: Ranks, publish) -> dict:  # noqa: ANN001
    """Rounds until the lead is done: take in, agree, train, and on the lead walk the run through the new steps.
    Each round trains to the rate limit (no real-time slices across ranks). Returns every rank's actor counts."""
    learner, transitions = run.learner, link.transitions
    while True:
        before = (learner.env_steps, learner.sim_steps, stats.intervened_steps)
        for actor_id, batch in transitions.poll_batches(timeout_s=0.0 if learner.updates_due else 0.01):
            for t in batch:
                learner.add(t, stream=actor_id)
                stats.intervened_steps += int(t.intervened)
        mine = [learner.env_steps - before[0], learner.sim_steps - before[1], stats.intervened_steps - before[2]]
        can_sample = len(learner.online) > 0 or len(learner.demo) > 0
        fleet, ready, done = ranks.exchange(mine, can_sample, run.done)
        if done:  # what came in since is not trained on, nor counted
            learner.env_steps, learner.sim_steps = before[:2]
            return ranks.gather(actor_counts(transitions.actors, learner.updates))
        # Steps past the budget are not counted, so not trained on (as a lone learner's), on every rank alike.
        fleet[0] = min(fleet[0], max(0, run.cfg.loop.env_steps - before[0]))
        learner.env_steps, learner.sim_steps = before[0] + fleet[0], before[1] + fleet[1]
        stats.steps += fleet[0]
        stats.intervened_steps = before[2] + fleet[2]
        if ready:
            learner.train_to_rate_limit()
        if not ranks.lead:
            _save_shard(run, before[0], fleet[0])
        else:
            publish(idle=not fleet[0])
            _walk(run, stats, before[0], fleet[0])
            take_episodes(run.state, link.episodes(), stats, run.refits)


def _save_shard(run: TrainingRun, start: int, steps: int) -> None:
    """A rank's checkpoint (its shard with it) where the lead saves one in this round's steps."""
    every = run.cfg.loop.checkpoint_every
    if every and (start + steps) // every > start // every:
        run.checkpoint(f"step_{(start + steps) // every * every:08d}", 0)


def _walk(run: TrainingRun, stats: EpisodeStats, start: int, steps: int) -> None:
    """The lead's run through the round's fleet steps, one at a time: logs, checkpoints and evaluations fall on
    their multiples as in a lone learner; the steps past a budget are not counted (as a lone learner's)."""
    for step in range(start + 1, start + steps + 1):
        run.learner.env_steps = step
        run.after_step(stats)
        if run.done:
            return
