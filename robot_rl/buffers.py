"""In-RAM replay for off-policy learning, the RLPD demo/online mixer, and stored demos read as transitions.

Observations live in a frame ring: each frame is written once and a transition at slot i reads its next
observation from slot i+1, so images are never duplicated as obs and next_obs. An episode's final observation
takes one extra slot that is not itself the start of a transition. A `frame_fn` (`set_frame_fn`) maps each frame
once as it is written, e.g. camera images to a frozen encoder's features, so sampling returns those instead. A
mapped key may hold several views of each frame (e.g. features of differently shifted images): sampling then
draws one of them per row, for obs and next obs independently.
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from robot_rl.errors import UserError
from robot_rl.types import Batch, NpObs, TorchObs, Transition

if TYPE_CHECKING:
    from robot_rl.demos.store import EpisodeStore


def _continuation_keys(obs: NpObs) -> list[str]:
    """What tells a continuing episode's obs from a new one's: the state vector where there is one (cheap to keep
    a host copy of every step), else every key."""
    return ["state"] if "state" in obs else list(obs)


class ReplayBuffer:
    """`device`: where sampled batches go (the learner's). Storage lives there too when it fits in half the device's
    free memory, so a batch is gathered without leaving the GPU; otherwise in host memory, gathered into pinned
    pages and copied without blocking. Transition validity and the sampling RNG stay on the host: drawing indices
    never waits for the device."""

    def __init__(self, capacity: int, seed: int | None = None, device: torch.device | str = "cpu") -> None:
        if capacity < 2:
            raise ValueError("capacity must be >= 2")
        self.capacity = capacity
        self.rng = np.random.default_rng(seed)
        self.device = torch.device(device)
        self.storage = torch.device("cpu")  # decided when the first frame's size is known (`_place`)
        self.obs: dict[str, torch.Tensor] = {}
        self.step: dict[str, torch.Tensor] = {}  # per-transition arrays: action, reward, terminated, ...
        self.valid = np.zeros(capacity, dtype=bool)  # slot i starts a transition whose next frame is i+1
        self.cursor = 0
        self.in_episode = False  # the frame at `cursor` is the current obs, already written
        self.n_added = 0
        self.frame_fn: Callable[[TorchObs], TorchObs] | None = None
        self.view_keys: tuple[str, ...] = ()  # frame keys stored as (capacity, views, ...): one view drawn per row
        self._last_next: NpObs | None = None  # host copy of the frame at `cursor`, to judge continuation

    def __len__(self) -> int:
        return int(self.valid.sum())

    def _place(self, frame_bytes: int) -> None:
        """Storage on the learner's device when `capacity` frames fit in half its free memory, else host memory."""
        self.storage = torch.device("cpu")
        if self.device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(self.device)
            if self.capacity * frame_bytes <= free // 2:
                self.storage = self.device

    def _alloc(self, store: dict[str, torch.Tensor], values: Mapping[str, torch.Tensor]) -> None:
        for k, v in values.items():
            if k not in store:
                store[k] = torch.zeros((self.capacity, *v.shape), dtype=v.dtype, device=self.storage)

    def _tensors(self, values: Mapping[str, object]) -> TorchObs:
        """Host values -> tensors where the storage is. To a GPU through page-locked memory: the copy then queues
        behind the learner's kernels; from pageable memory CUDA may wait for every update queued before it."""
        out = {k: torch.as_tensor(np.asarray(v)) for k, v in values.items()}
        if self.storage.type == "cuda":
            out = {k: v.pin_memory().to(self.storage, non_blocking=True) for k, v in out.items()}
        return out

    def _write_frame(self, slot: int, frame: TorchObs) -> None:
        # Overwriting a frame breaks the transition that used it as next obs, and the one starting there.
        self.valid[slot] = False
        self.valid[(slot - 1) % self.capacity] = False
        for k, v in frame.items():
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
        if not self.obs:
            self._place(sum(np.asarray(v).nbytes for v in t.next_obs.values()))
        next_frame = self._frame(t.next_obs)
        self._alloc(self.obs, next_frame)
        step_t = self._tensors(step)
        self._alloc(self.step, step_t)
        if self.in_episode and not self._continues(t.obs):
            self.break_sequence()  # e.g. an episode the env aborted: the stream went on with a new one
        i = self.cursor
        if not self.in_episode:
            self._write_frame(i, self._frame(t.obs))
        nxt = (i + 1) % self.capacity
        self._write_frame(nxt, next_frame)
        for k, v in step_t.items():
            self.step[k][i] = v
        self.valid[i] = True
        self.n_added += 1
        self._last_next = {k: np.array(t.next_obs[k]) for k in _continuation_keys(t.next_obs)}
        if t.done:
            self.cursor = (nxt + 1) % self.capacity
            self.in_episode = False
        else:
            self.cursor = nxt
            self.in_episode = True

    def _continues(self, obs: NpObs) -> bool:
        """Whether `obs` is the last transition's next obs, as a continuing episode's is (judged on the state
        vector where there is one, on the host: no device round trip)."""
        if self._last_next is None:
            return False
        return all(np.array_equal(self._last_next[k], obs[k]) for k in _continuation_keys(obs))

    def _frame(self, obs: NpObs) -> TorchObs:
        frame = self._tensors(obs)
        return {k: v.to(self.storage) for k, v in self.frame_fn(frame).items()} if self.frame_fn else frame

    def _filled(self) -> int:
        """Slots that may hold a transition. Every episode end and sequence break skips a slot, so the cursor wraps
        before `capacity` transitions were added: counting `n_added` alone, sampling right after a wrap saw only
        the slots before the cursor, none of them valid yet, and its rejection loop never ended."""
        if self.n_added >= self.capacity or self.valid[self.cursor + 1 :].any():
            return self.capacity
        return self.cursor + 1

    def set_frame_fn(self, fn: Callable[[TorchObs], TorchObs], chunk: int = 256, view_keys: Sequence[str] = ()) -> None:
        """Maps the frames already stored through `fn` (a batch at a time) and every frame written from now on.
        `view_keys`: the keys `fn` maps to a views axis after the frame's (one frame -> (views, ...))."""
        self.frame_fn = fn
        self.view_keys = tuple(view_keys)
        if not self.obs:
            return
        filled = self._filled()
        mapped: TorchObs = {}
        for start in range(0, filled, chunk):
            out = fn({k: v[start : min(start + chunk, filled)] for k, v in self.obs.items()})
            if not mapped:
                mapped = {k: torch.zeros((self.capacity, *v.shape[1:]), dtype=v.dtype, device=self.storage)
                          for k, v in out.items()}  # fmt: skip
            for k, v in out.items():
                mapped[k][start : start + len(v)] = v
        self.obs = mapped

    def break_sequence(self) -> None:
        """The next transition does not continue the last one (e.g. a new intervention segment)."""
        if self.in_episode:
            self.cursor = (self.cursor + 1) % self.capacity
            self.in_episode = False
        self._last_next = None

    def sample_indices(self, n: int) -> np.ndarray:
        if not self.valid.any():
            raise RuntimeError("cannot sample from an empty replay buffer")
        filled = self._filled()
        out = np.empty(0, dtype=np.int64)
        while out.size < n:  # rejection: almost every filled slot is valid, so this loops about once
            idx = self.rng.integers(0, filled, size=2 * n)
            out = np.concatenate([out, idx[self.valid[idx]]])
        return out[:n]

    def sample(self, n: int) -> Batch:
        """A batch on `device`. `index_select` gathers as fast as numpy's fancy indexing on a CPU (plain tensor
        indexing is ~20x slower on images)."""
        rows = self.sample_indices(n)
        idx = self._tensors(self._gather_rows(rows))
        nxt = self._tensors(self._gather_rows((rows + 1) % self.capacity))
        pinned = self.storage.type == "cpu" and self.device.type == "cuda"

        def t(x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
            if not pinned:
                return x.index_select(0, rows)
            out = torch.empty((len(rows), *x.shape[1:]), dtype=x.dtype, pin_memory=True)
            return torch.index_select(x, 0, rows, out=out).to(self.device, non_blocking=True)

        def frames(at: TorchObs) -> TorchObs:
            """A views key gathers its drawn view from a (capacity * views, ...) view of itself: no copy of the rest."""
            return {k: t(v.flatten(0, 1), at[k]) if k in at else t(v, at[""]) for k, v in self.obs.items()}

        i = idx[""]
        return Batch(
            obs=frames(idx),
            action=t(self.step["action"], i),
            reward=t(self.step["reward"], i),
            next_obs=frames(nxt),
            terminated=t(self.step["terminated"], i),
            intervened=t(self.step["intervened"], i),
            extras={k[len("extra.") :]: t(v, i) for k, v in self.step.items() if k.startswith("extra.")},
        )

    def _gather_rows(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        """Where to gather from: "" the slots, and per views key its flat row `slot * views + drawn view`."""
        out = {"": rows}
        for k in self.view_keys:
            views = self.obs[k].shape[1]
            out[k] = rows * views + self.rng.integers(0, views, size=len(rows))
        return out

    def valid_states(self) -> torch.Tensor:
        """The states that start a stored transition, on the host (e.g. to fit a normaliser)."""
        return self.obs["state"][torch.from_numpy(self.valid).to(self.storage)].cpu()

    def state_dict(self) -> dict[str, np.ndarray]:
        """The slots filled so far, not the whole ring: storage is allocated at `capacity` up front, and a pixel
        run's is gigabytes of zeros until it wraps."""
        n = self._filled()
        d = {f"obs.{k}": _to_numpy(v[:n]) for k, v in self.obs.items()}
        d.update({f"step.{k}": _to_numpy(v[:n]) for k, v in self.step.items()})
        d["bfloat16"] = np.array([k for k, v in (*self.obs.items(), *self.step.items()) if v.dtype == torch.bfloat16])
        counters = [self.cursor, int(self.in_episode), self.n_added, self.capacity]
        d.update(valid=self.valid[:n], counters=np.array(counters, dtype=np.int64))
        return d

    def load_state_dict(self, d: Mapping[str, np.ndarray]) -> None:
        counters = [int(x) for x in d["counters"]]
        capacity = counters[3] if len(counters) > 3 else d["valid"].shape[0]  # saved whole before the capacity
        if capacity != self.capacity:
            raise ValueError(f"saved buffer capacity {capacity} != configured {self.capacity}")
        bf16 = set(d["bfloat16"].tolist()) if "bfloat16" in d else set()
        obs = {k[4:]: v for k, v in d.items() if k.startswith("obs.")}
        self._place(sum(v[0].nbytes for v in obs.values()))
        self.obs = {k: self._ring(_from_numpy(v, k in bf16)) for k, v in obs.items()}
        self.step = {k[5:]: self._ring(_from_numpy(v, k[5:] in bf16)) for k, v in d.items() if k.startswith("step.")}
        self.valid = np.zeros(capacity, dtype=bool)
        self.valid[: len(d["valid"])] = d["valid"]
        self.cursor, in_ep, self.n_added = counters[:3]
        self.in_episode = bool(in_ep)
        self._last_next = None  # a resumed stream starts a new sequence

    def _ring(self, filled: torch.Tensor) -> torch.Tensor:
        """Saved slots back into a ring of `capacity` on the storage device."""
        ring = filled.new_zeros((self.capacity, *filled.shape[1:]), device=self.storage)
        ring[: len(filled)] = filled
        return ring

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


def _to_numpy(t: torch.Tensor) -> np.ndarray:
    """numpy has no bfloat16: such a tensor (stored trunk features) is saved as its bits, named in `"bfloat16"`."""
    t = t.cpu()
    return t.view(torch.int16).numpy() if t.dtype == torch.bfloat16 else t.numpy()


def _from_numpy(a: np.ndarray, bf16: bool) -> torch.Tensor:
    return torch.from_numpy(a).view(torch.bfloat16) if bf16 else torch.from_numpy(a)


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


def episode_transitions(store: EpisodeStore, i: int, obs_keys: list[str]) -> Iterator[Transition]:
    """Stored episode i as transitions; next_obs of the last step comes from the `final` record."""
    ep = store.episode(i)
    final = store.final(i)
    n = len(ep["action"])
    for t in range(n):
        nxt = {k: ep[k][t + 1] for k in obs_keys} if t + 1 < n else {k: final[k] for k in obs_keys}
        yield Transition(
            obs={k: ep[k][t] for k in obs_keys},
            action=ep["action"][t],
            reward=float(ep["reward"][t]),
            next_obs=nxt,
            terminated=bool(ep["terminated"][t]),
            truncated=bool(ep["truncated"][t]) or t == n - 1,
            intervened=bool(ep["intervened"][t]),
        )
