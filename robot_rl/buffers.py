"""In-RAM replay for off-policy learning, and the RLPD demo/online mixer.

Observations live in a frame ring: each frame is written once and a transition at slot i reads its next
observation from slot i+1, so images are never duplicated as obs and next_obs. An episode's final observation
takes one extra slot that is not itself the start of a transition. A `frame_fn` (`set_frame_fn`) maps each frame
once as it is written, e.g. camera images to a frozen encoder's features, so sampling returns those instead.
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import torch

from robot_rl.errors import UserError
from robot_rl.types import Batch, NpObs, Transition


class ReplayBuffer:
    def __init__(self, capacity: int, seed: int | None = None) -> None:
        if capacity < 2:
            raise ValueError("capacity must be >= 2")
        self.capacity = capacity
        self.rng = np.random.default_rng(seed)
        self.obs: dict[str, np.ndarray] = {}
        self.step: dict[str, np.ndarray] = {}  # per-transition arrays: action, reward, terminated, ...
        self.valid = np.zeros(capacity, dtype=bool)  # slot i starts a transition whose next frame is i+1
        self.cursor = 0
        self.in_episode = False  # the frame at `cursor` is the current obs, already written
        self.n_added = 0
        self.frame_fn: Callable[[NpObs], NpObs] | None = None

    def __len__(self) -> int:
        return int(self.valid.sum())

    def _alloc(self, store: dict[str, np.ndarray], values: Mapping[str, np.ndarray]) -> None:
        for k, v in values.items():
            if k not in store:
                v = np.asarray(v)
                store[k] = np.zeros((self.capacity, *v.shape), dtype=v.dtype)

    def _write_frame(self, slot: int, obs: NpObs) -> None:
        # Overwriting a frame breaks the transition that used it as next obs, and the one starting there.
        self.valid[slot] = False
        self.valid[(slot - 1) % self.capacity] = False
        for k, v in obs.items():
            self.obs[k][slot] = v

    def add(self, t: Transition) -> None:
        """Transitions of one episode must arrive in order; a new episode starts after a done one, or where a
        transition's obs is not the last one's next obs (an aborted episode is never stitched to the next)."""
        step = {
            "action": np.asarray(t.action, np.float32),
            "reward": np.float32(t.reward),
            "terminated": np.float32(t.terminated),
            "intervened": np.float32(t.intervened),
            **{f"extra.{k}": np.asarray(v) for k, v in t.extras.items()},
        }
        next_frame = self._frame(t.next_obs)
        if not self.obs:
            self._alloc(self.obs, next_frame)
        self._alloc(self.step, step)
        if self.in_episode and not self._continues(t.obs):
            self.break_sequence()  # e.g. an episode the env aborted: the stream went on with a new one
        i = self.cursor
        if not self.in_episode:
            self._write_frame(i, self._frame(t.obs))
        nxt = (i + 1) % self.capacity
        self._write_frame(nxt, next_frame)
        for k, v in step.items():
            self.step[k][i] = v
        self.valid[i] = True
        self.n_added += 1
        if t.done:
            self.cursor = (nxt + 1) % self.capacity
            self.in_episode = False
        else:
            self.cursor = nxt
            self.in_episode = True

    def _continues(self, obs: NpObs) -> bool:
        """Whether `obs` is the frame at the cursor (the last transition's next obs), as a continuing episode's is.
        Judged on the state vector where there is one: camera frames may be stored as trunk features."""
        keys = ["state"] if "state" in obs else list(obs)
        frame = obs if "state" in obs else self._frame(obs)
        return all(np.array_equal(self.obs[k][self.cursor], frame[k]) for k in keys)

    def _frame(self, obs: NpObs) -> NpObs:
        return self.frame_fn(obs) if self.frame_fn is not None else obs

    def set_frame_fn(self, fn: Callable[[NpObs], NpObs], chunk: int = 256) -> None:
        """Maps the frames already stored through `fn` (a batch at a time) and every frame written from now on."""
        self.frame_fn = fn
        if not self.obs:
            return
        filled = self.capacity if self.n_added >= self.capacity else min(self.capacity, self.cursor + 1)
        mapped: dict[str, np.ndarray] = {}
        for start in range(0, filled, chunk):
            out = fn({k: v[start : min(start + chunk, filled)] for k, v in self.obs.items()})
            if not mapped:
                mapped = {k: np.zeros((self.capacity, *v.shape[1:]), v.dtype) for k, v in out.items()}
            for k, v in out.items():
                mapped[k][start : start + len(v)] = v
        self.obs = mapped

    def break_sequence(self) -> None:
        """The next transition does not continue the last one (e.g. a new intervention segment)."""
        if self.in_episode:
            self.cursor = (self.cursor + 1) % self.capacity
            self.in_episode = False

    def sample_indices(self, n: int) -> np.ndarray:
        if not self.valid.any():
            raise RuntimeError("cannot sample from an empty replay buffer")
        filled = self.capacity if self.n_added >= self.capacity else min(self.capacity, self.cursor + 1)
        out = np.empty(0, dtype=np.int64)
        while out.size < n:  # rejection: almost every filled slot is valid, so this loops about once
            idx = self.rng.integers(0, filled, size=2 * n)
            out = np.concatenate([out, idx[self.valid[idx]]])
        return out[:n]

    def sample(self, n: int) -> Batch:
        idx = self.sample_indices(n)
        nxt = (idx + 1) % self.capacity

        def t(x: np.ndarray) -> torch.Tensor:
            return torch.from_numpy(x)

        return Batch(
            obs={k: t(v[idx]) for k, v in self.obs.items()},
            action=t(self.step["action"][idx]),
            reward=t(self.step["reward"][idx]),
            next_obs={k: t(v[nxt]) for k, v in self.obs.items()},
            terminated=t(self.step["terminated"][idx]),
            intervened=t(self.step["intervened"][idx]),
            extras={k[len("extra.") :]: t(v[idx]) for k, v in self.step.items() if k.startswith("extra.")},
        )

    def state_dict(self) -> dict[str, np.ndarray]:
        d = {f"obs.{k}": v for k, v in self.obs.items()}
        d.update({f"step.{k}": v for k, v in self.step.items()})
        d.update(
            valid=self.valid,
            counters=np.array([self.cursor, int(self.in_episode), self.n_added], dtype=np.int64),
        )
        return d

    def load_state_dict(self, d: Mapping[str, np.ndarray]) -> None:
        if d["valid"].shape[0] != self.capacity:
            raise ValueError(f"saved buffer capacity {d['valid'].shape[0]} != configured {self.capacity}")
        self.obs = {k[4:]: np.array(v) for k, v in d.items() if k.startswith("obs.")}
        self.step = {k[5:]: np.array(v) for k, v in d.items() if k.startswith("step.")}
        self.valid = np.array(d["valid"])
        cursor, in_ep, n_added = (int(x) for x in d["counters"])
        self.cursor, self.in_episode, self.n_added = cursor, bool(in_ep), n_added

    def save(self, path: Path) -> None:
        """Uncompressed npz: frames are uint8 already and resume speed matters more than disk."""
        with open(path, "wb") as f:
            np.savez(f, **self.state_dict())

    def load(self, path: Path) -> None:
        try:
            with np.load(path) as d:
                arrays = dict(d)
        except FileNotFoundError:
            raise UserError(f"{path}: no such file") from None
        except (zipfile.BadZipFile, EOFError, OSError, ValueError) as e:  # ValueError: not an npz at all
            raise UserError(f"{path}: damaged or truncated checkpoint file ({' '.join(str(e).split())})") from None
        self.load_state_dict(arrays)


class MixedSampler:
    """RLPD: each batch is `demo_ratio` demo data and the rest online data (all demo until online exists)."""

    def __init__(self, demo: ReplayBuffer, online: ReplayBuffer, batch_size: int, demo_ratio: float) -> None:
        self.demo, self.online = demo, online
        self.batch_size = batch_size
        self.n_demo = int(round(batch_size * demo_ratio))

    def sample(self) -> Batch:
        if len(self.online) == 0:
            return self.demo.sample(self.batch_size)
        if len(self.demo) == 0 or self.n_demo == 0:
            return self.online.sample(self.batch_size)
        return Batch.cat(self.demo.sample(self.n_demo), self.online.sample(self.batch_size - self.n_demo))
