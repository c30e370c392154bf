"""The learner: transitions in, weights out, at a fixed update-to-data rate.

Human-acted transitions go into both buffers (HIL-SERL): the demo side of the RLPD mix then learns from
every correction, the online side keeps the true state distribution.
"""

from __future__ import annotations

import math
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import fields

import torch

from robot_rl.algos.sac import SAC
from robot_rl.buffers import MixedSampler, ReplayBuffer
from robot_rl.types import Batch, Transition


class Learner:
    def __init__(
        self,
        algo: SAC,
        demo: ReplayBuffer,
        online: ReplayBuffer,
        learning_starts: int = 0,
        critic_warmup: int = 0,
    ) -> None:
        self.algo = algo
        self.demo, self.online = demo, online
        self.sampler = MixedSampler(demo, online, algo.cfg.batch_size, algo.cfg.demo_ratio)
        self.learning_starts, self.critic_warmup = learning_starts, critic_warmup
        self.env_steps = 0  # transitions, i.e. agent steps
        self.sim_steps = 0  # env steps behind them: more than env_steps when an agent step is an action chunk
        self.updates = 0  # SAC.update calls; each holds `utd` critic steps
        self._last_intervened = False
        self._last_stream = ""
        self._stats: dict[str, torch.Tensor] = {}
        on_gpu = torch.cuda.is_available() and algo.log_alpha.device.type == "cuda"
        self._graphed = GraphedUpdate(algo) if on_gpu and algo.cfg.cuda_graph else None

    def add(self, t: Transition, stream: str = "") -> None:
        """`stream` names the actor: transitions of one stream arrive in order, streams interleave."""
        if stream != self._last_stream:
            self.online.break_sequence()
            self.demo.break_sequence()
            self._last_stream, self._last_intervened = stream, False
        self.online.add(t)
        if t.intervened:
            if not self._last_intervened:
                self.demo.break_sequence()
            self.demo.add(t)
        self._last_intervened = t.intervened and not t.done
        self.env_steps += 1
        self.sim_steps += int(t.extras.get("chunk_length", 1))

    @property
    def updates_due(self) -> int:
        """Rate limit: one update call (utd critic steps) per env step past `learning_starts`."""
        return max(0, self.env_steps - self.learning_starts) - self.updates

    @property
    def replay_ratio(self) -> float:
        """Critic updates per transition past `learning_starts`: `utd` where the learner kept up with its actors."""
        return self.updates * self.algo.cfg.utd / max(1, self.env_steps - self.learning_starts)

    def update(self) -> None:
        """`utd` critic steps and one actor step (none in the first `critic_warmup` updates, run eagerly); nothing
        here waits for the device (batches are sampled on it, stats stay there until `last_stats` reads them)."""
        batches = [self.sampler.sample() for _ in range(self.algo.cfg.utd)]
        if self.updates < self.critic_warmup:
            self._stats = self.algo.update(batches, actor=False)
        else:
            self._stats = self._graphed(batches) if self._graphed else self.algo.update(batches)
        self.updates += 1

    @property
    def last_stats(self) -> dict[str, float]:
        """The last update's stats, read from the device now (one copy for all of them)."""
        if not self._stats:
            return {}
        values = torch.stack([v.float() for v in self._stats.values()]).tolist()
        return dict(zip(self._stats, values, strict=True))

    def train_to_rate_limit(self) -> None:
        self.train_for(math.inf)

    def train_for(self, seconds: float) -> None:
        """The updates due, for about `seconds` (at least one): a learner behind its robots takes in their
        transitions between slices instead of holding them back, and its replay ratio falls below `utd` meanwhile."""
        until = time.monotonic() + seconds
        while self.updates_due > 0:
            self.update()
            if time.monotonic() >= until:
                return

    def policy_weights(self) -> dict[str, torch.Tensor]:
        """Host copy of what actors run, each tensor its own storage (safetensors refuses shared ones). From a GPU
        one device-to-host copy for all tensors (one per tensor was ~20 blocking copies an env step)."""
        state = {k: v.detach() for k, v in self.algo.policy.state_dict().items()}
        if next(iter(state.values())).device.type == "cpu":
            return {k: v.clone() for k, v in state.items()}
        flat = torch.cat([v.reshape(-1).float() for v in state.values()]).cpu()
        out, i = {}, 0
        for k, v in state.items():
            out[k] = flat[i : i + v.numel()].view(v.shape).to(v.dtype, copy=True)
            i += v.numel()
        return out


class GraphedUpdate:
    """`SAC.update` as one CUDA graph (`sac.cuda_graph`). Batches are sampled outside it and copied into its static
    inputs. The first `WARMUP` calls run eagerly on a side stream (optimiser state, cuBLAS workspaces and autograd
    are set up before a capture, as CUDA graphs require); the next captures and replays, every later one replays.
    A batch of another structure (say, extras the demo side starts to carry) runs eagerly and captures anew."""

    WARMUP = 3

    def __init__(self, algo: SAC) -> None:
        self.algo = algo
        for opt in algo.optimizers().values():  # optimiser steps that read their step count on the device
            for group in opt.param_groups:
                group["capturable"] = True
        self._side = torch.cuda.Stream(device=algo.log_alpha.device)
        self._key: tuple[int, Batch] | None = None
        self._eager_left = self.WARMUP
        self._graph: torch.cuda.CUDAGraph | None = None
        self._inputs: list[Batch] = []
        self._stats: dict[str, torch.Tensor] = {}

    def __call__(self, batches: list[Batch]) -> dict[str, torch.Tensor]:
        if (key := _structure(batches)) != self._key:
            self._key, self._eager_left, self._graph = key, self.WARMUP, None
        if self._eager_left:
            self._eager_left -= 1
            self._side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self._side):
                stats = self.algo.update(batches)
            torch.cuda.current_stream().wait_stream(self._side)
            return stats
        if self._graph is None:
            self._inputs = [_tensors_map(b, torch.clone) for b in batches]
            self._graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self._graph, capture_error_mode="thread_local"):  # the actor may use CUDA
                self._stats = self.algo.update(self._inputs)
        for dst, src in zip(self._inputs, batches, strict=True):
            _tensors_map(dst, torch.Tensor.copy_, src)
        self._graph.replay()
        return self._stats


def _tensors_map(x, fn, other=None):  # noqa: ANN001, ANN202
    """`fn` over every tensor of a Batch (or its dicts), paired with `other`'s where given."""
    if isinstance(x, torch.Tensor):
        return fn(x) if other is None else fn(x, other)
    if isinstance(x, dict):
        return {k: _tensors_map(v, fn, None if other is None else other[k]) for k, v in x.items()}
    return Batch(**{f.name: _tensors_map(getattr(x, f.name), fn, None if other is None else getattr(other, f.name))
                    for f in fields(x)})  # fmt: skip


def _structure(batches: list[Batch]) -> tuple[int, Batch]:
    """What a capture is bound to: the number of batches and each tensor's shape and dtype, by field and key."""
    return len(batches), _tensors_map(batches[0], lambda t: (t.shape, t.dtype))


class BackgroundUpdates:
    """`learner.train_to_rate_limit()` in a worker thread, so the actor's next env step overlaps the updates due for
    the last transition (the GPU, or the second core, computes while the simulator steps).

    Between `start()` and `wait()` only the actor runs: adding, weight pulls, evaluations and checkpoints come after
    `wait()`. Every update sees the data it would in one thread, at the same update-to-data ratio; the actor acts
    on weights one update older. Both threads draw from torch's one global RNG, in an order timing decides, so runs
    are not bit-reproducible (`loop.overlap=false` is)."""

    def __init__(self, learner: Learner) -> None:
        self.learner = learner
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="learner")
        self._pending: Future | None = None

    def start(self) -> None:
        self._pending = self._pool.submit(self.learner.train_to_rate_limit)

    def wait(self) -> None:
        """Until the updates started last are done; raises what they raised."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def close(self) -> None:
        try:
            self.wait()
        finally:
            self._pool.shutdown()
