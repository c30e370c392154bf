"""Replay: frames stored once, next_obs correct across episode ends and ring wrap-around, save/restore."""

import numpy as np
import pytest
import torch

from robot_rl.buffers import MixedSampler, ReplayBuffer
from robot_rl.types import Transition


def episode(start: int, length: int, terminated: bool = True) -> list[Transition]:
    """Observation value = global frame counter, so next_obs must equal obs + 1 within an episode."""
    out = []
    for t in range(length):
        o, n = start + t, start + t + 1
        last = t == length - 1
        out.append(
            Transition(
                obs={"state": np.full(2, o, np.float32), "cam": np.full((4, 4, 3), o % 256, np.uint8)},
                action=np.full(3, o, np.float32),
                reward=float(o),
                next_obs={"state": np.full(2, n, np.float32), "cam": np.full((4, 4, 3), n % 256, np.uint8)},
                terminated=last and terminated,
                truncated=last and not terminated,
            )
        )
    return out


def check(buf: ReplayBuffer, n: int = 500) -> None:
    b = buf.sample(n)
    s, ns = b.obs["state"][:, 0], b.next_obs["state"][:, 0]
    assert np.array_equal(ns.numpy(), s.numpy() + 1)
    assert np.array_equal(b.action[:, 0].numpy(), s.numpy())
    assert np.array_equal(b.obs["cam"][:, 0, 0, 0].numpy(), s.numpy().astype(np.int64) % 256)


def test_next_obs_across_episodes_and_wraparound() -> None:
    buf = ReplayBuffer(capacity=37, seed=0)
    start = 0
    for k in range(20):
        for t in episode(start, 3 + k % 5, terminated=k % 2 == 0):
            buf.add(t)
        start += 100
    check(buf)
    assert len(buf) <= 37
    assert buf.obs["cam"].shape[0] == 37  # frames stored once: no separate next_obs array


def test_sampling_right_after_the_cursor_wraps_before_capacity_transitions() -> None:
    """Each episode end skips a slot: 5 episodes of 3 fill 20 slots with 15 transitions, the cursor back at 0."""
    buf = ReplayBuffer(capacity=20, seed=0)
    for k in range(5):
        for t in episode(100 * k, 3):
            buf.add(t)
    assert buf.cursor == 0 and buf.n_added == 15
    check(buf)  # used to loop forever: only slot 0 was sampled, and it held no transition


def test_terminated_flag_only_on_terminal_steps() -> None:
    buf = ReplayBuffer(100, seed=1)
    for t in episode(0, 5, terminated=True) + episode(50, 5, terminated=False):
        buf.add(t)
    b = buf.sample(400)
    s = b.obs["state"][:, 0].numpy()
    assert set(s[b.terminated.numpy() == 1].tolist()) == {4.0}  # truncated episode's end bootstraps


def test_break_sequence_segments() -> None:
    buf = ReplayBuffer(50, seed=2)
    ep = episode(0, 10, terminated=False)
    for t in ep[2:4]:
        buf.add(t)
    buf.break_sequence()
    for t in ep[6:8]:
        buf.add(t)
    check(buf, 100)
    assert sorted(set(buf.sample(200).obs["state"][:, 0].tolist())) == [2.0, 3.0, 6.0, 7.0]


def test_save_restore_roundtrip(tmp_path) -> None:
    buf = ReplayBuffer(40, seed=3)
    for t in episode(0, 7):
        buf.add(t)
    buf.save(tmp_path / "b.npz")
    with np.load(tmp_path / "b.npz") as saved:  # the filled slots, not the ring's capacity of zeros
        assert len(saved["obs.state"]) == len(saved["valid"]) == buf.cursor + 1 < 40
    other = ReplayBuffer(40, seed=3)
    other.load(tmp_path / "b.npz")
    assert len(other) == len(buf) and other.cursor == buf.cursor
    for t in episode(200, 3):
        other.add(t)
    check(other)


def test_bfloat16_features_restore_bit_for_bit(tmp_path) -> None:
    """numpy has no bfloat16: the features a bf16 learner stores are saved as their bits and come back as bfloat16."""
    buf = ReplayBuffer(40, seed=3)
    buf.set_frame_fn(lambda obs: {**obs, "cam": obs["cam"][..., 0, 0, :].to(torch.bfloat16) / 7})
    for t in episode(0, 7):
        buf.add(t)
    buf.save(tmp_path / "b.npz")
    other = ReplayBuffer(40, seed=3)
    other.load(tmp_path / "b.npz")
    assert other.obs["cam"].dtype == torch.bfloat16 and other.obs["state"].dtype == torch.float32
    assert torch.equal(other.obs["cam"], buf.obs["cam"]) and torch.equal(other.obs["state"], buf.obs["state"])


def test_a_wrapped_buffer_and_one_saved_whole_restore_as_they_were(tmp_path) -> None:
    buf = ReplayBuffer(16, seed=3)
    for start in (0, 100, 200):
        for t in episode(start, 7):
            buf.add(t)
    whole = buf.state_dict()
    n = len(whole["valid"])
    assert n == 16  # wrapped: every slot
    half = ReplayBuffer(16, seed=3)
    for t in episode(0, 5):
        half.add(t)
    old = half.state_dict()  # as saved before the capacity counter: every array at capacity, three counters
    old = {k: np.concatenate([v, np.zeros((16 - len(v), *v.shape[1:]), v.dtype)]) if k != "counters" else v[:3]
           for k, v in old.items()}  # fmt: skip
    for d, src in ((whole, buf), (old, half)):
        other = ReplayBuffer(16, seed=3)
        other.load_state_dict(d)
        assert (other.valid == src.valid).all() and other.cursor == src.cursor and len(other) == len(src)
        assert torch.equal(other.obs["state"], src.obs["state"])
    with pytest.raises(ValueError, match="capacity 16 != configured 32"):
        ReplayBuffer(32).load_state_dict(whole)


def test_mixed_sampler_ratio() -> None:
    demo, online = ReplayBuffer(100, seed=4), ReplayBuffer(100, seed=5)
    for t in episode(0, 20):
        demo.add(t)
    mix = MixedSampler(demo, online, batch_size=64, demo_ratio=0.5)
    assert mix.sample().size == 64  # all demo before online data exists
    for t in episode(1000, 20):
        online.add(t)
    s = mix.sample().obs["state"][:, 0].numpy()
    assert (s < 1000).sum() == 32 and (s >= 1000).sum() == 32


def test_frame_fn_maps_stored_and_new_frames_once() -> None:
    """Frames already stored are mapped when the function is set, later ones as they are written; the
    obs/next_obs pairing is untouched (the function sees each frame once, not once per transition)."""
    buf = ReplayBuffer(capacity=64, seed=0)
    for t in episode(0, 5):
        buf.add(t)
    calls = []

    def to_feature(obs: dict) -> dict:
        calls.append(len(obs["cam"]) if obs["cam"].ndim == 4 else 1)
        return {**obs, "cam": obs["cam"][..., 0, 0, :1].to(torch.float16)}

    buf.set_frame_fn(to_feature)
    for t in episode(100, 6):
        buf.add(t)
    assert sum(calls) == 7 + 7  # the slots filled so far (chunked), then 7 frames written one at a time
    b = buf.sample(300)
    s, ns = b.obs["state"][:, 0], b.next_obs["state"][:, 0]
    assert np.array_equal(ns.numpy(), s.numpy() + 1)
    assert b.obs["cam"].shape == (300, 1) and b.obs["cam"].dtype == torch.float16
    assert np.array_equal(b.obs["cam"][:, 0].numpy(), s.numpy() % 256)
