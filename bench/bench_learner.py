"""Learner update rate at batch 256 against LeRobot 0.4.4's SAC measured in the same run, at each stack's default
sizes and at sizes matched to the other's work; achieved GFLOP/s next to a plain batched matmul; threads. GPU
rows come from `bench/gpu_check.sh` (one prepared call on a GPU box).

The peer runs in the LeRobot reference environment (`/work/shared/recipes/lerobot-reference-env.sh DIR`, found at
`$LEROBOT_REF` or /work/lerobot-ref) as a subprocess serving `lerobot_sac_peer.py`; where that environment is
absent its rows say "not measured". Rounds alternate peer and ours; medians of the rounds are reported.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from common import latency_ms, rates
from torch.utils.flop_counter import FlopCounterMode

from robot_rl.algos.sac import SAC, SACConfig
from robot_rl.hardware import fastest_threads
from robot_rl.types import Batch

STATE_DIM, PROPRIO_DIM, ACT_DIM, B = 13, 7, 4, 256
CAMERAS = ("front", "wrist")
HERE = Path(__file__).resolve().parent
NOT_MEASURED = "not measured"

# Sizes matched across stacks by FLOPs per update (the work), with the parameter count reported beside them.
# LeRobot's defaults: a 256-wide encoder layer per input before [256, 256] critics and actor -> ours at (384, 384).
# Ours: (256, 256) on the raw state -> LeRobot with a 16-wide state encoder and [232, 232] networks.
# Pixels: LeRobot's encoder (7x7 and 5x5 stride-2 convs, run uncached for every actor/critic call) at width 4.
STATE_COMPARISONS = (
    ("state, LeRobot's default sizes", {}, (384, 384)),
    (
        "state, robot_rl's default sizes",
        {
            "latent_dim": 16,
            "critic_network_kwargs": {"hidden_dims": [232, 232]},
            "actor_network_kwargs": {"hidden_dims": [232, 232]},
        },
        (256, 256),
    ),
)
PIXEL_COMPARISONS = (
    ("2x128 px, LeRobot's defaults vs robot_rl's defaults", {}),
    ("2x128 px, LeRobot sized to robot_rl's work", {"image_encoder_hidden_dim": 4, "latent_dim": 64}),
)


def make_batch(
    cameras: tuple[str, ...], size: int, batch: int = B, device: str = "cpu", sac: SAC | None = None
) -> Batch:
    """Random observations; with a frozen-trunk `sac`, cameras as the trunk features its replay buffer stores."""

    def obs() -> dict[str, torch.Tensor]:
        o = {"state": torch.randn(batch, PROPRIO_DIM if cameras else STATE_DIM)}
        o.update({c: torch.randint(0, 255, (batch, size, size, 3), dtype=torch.uint8) for c in cameras})
        if sac is not None and sac.policy.encoder.frozen_trunk:
            o.update({k: torch.as_tensor(v) for k, v in sac.policy.encoder.embed_frames(o).items()})
        return o

    return Batch(
        obs=obs(),
        action=torch.rand(batch, ACT_DIM) * 2 - 1,
        reward=torch.rand(batch),
        next_obs=obs(),
        terminated=torch.zeros(batch),
        intervened=torch.zeros(batch),
    ).to(device)


class Variant:
    """One of our learners as timed: an update on `batch`, plus, with a frozen trunk, reducing the one new frame
    an env step brings (2 cameras, batch 1) to trunk features: at UTD 1 that is the per-update share of it."""

    def __init__(self, sac: SAC, cameras: tuple[str, ...], size: int) -> None:
        self.sac = sac
        self.batch = make_batch(cameras, size, sac=sac)
        one = make_batch(cameras, size, batch=1).obs
        self.frame = {k: v[0].numpy() for k, v in one.items()} if sac.policy.encoder.frozen_trunk else None
        self.reps_scale = 20 if self.frame is not None else 1  # ~20x cheaper: as many seconds timed as the others

    def step(self) -> None:
        self.sac.update([self.batch])
        if self.frame is not None:
            self.sac.policy.encoder.embed_frames(self.frame)


def update_flops(v: Variant) -> int:
    v.step()  # first: a one-off start-up probe (bf16 speed) must not be counted as the update's work
    with FlopCounterMode(display=False) as fc:
        v.step()
    return fc.get_total_flops()


def n_params(sac: SAC) -> int:
    """Everything an optimiser or the actor holds; target networks left out (LeRobot's count is made the same way)."""
    return sum(p.numel() for n, p in sac.named_parameters() if not n.startswith("target_critic"))


def bmm_gflops(width: int, dtype: torch.dtype, seconds: float = 0.5) -> float:
    """The critic's dominant GEMM, (2, 256, w) x (2, w, w), alone at one thread: what the box's matmul can do."""
    x, w = torch.randn(2, B, width, dtype=dtype), torch.randn(2, width, width, dtype=dtype)
    reps = max(1, int(seconds * 100e9 / (4 * B * width * width)))
    _, cpu = rates(lambda: torch.bmm(x, w), reps)
    return cpu * 2 * 2 * B * width * width / 1e9


class Peer:
    """LeRobot's SAC update in its own interpreter; `measure` answers one round."""

    def __init__(self, python: Path, tv_overlay: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(tv_overlay), "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
        self.proc = subprocess.Popen(
            [str(python), str(HERE / "lerobot_sac_peer.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )

    def measure(self, name: str, obs: str, overrides: dict, reps: int) -> dict:
        req = {"name": name, "obs": obs, "image_size": 128, "overrides": overrides, "reps": reps, "threads": 1}
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the LeRobot peer exited")
        return json.loads(line)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def start_peer() -> tuple[Peer | None, str]:
    root = Path(os.environ.get("LEROBOT_REF", "/work/lerobot-ref"))
    python = root / ".venv" / "bin" / "python"
    if not python.exists():
        return None, f"{NOT_MEASURED}: no LeRobot reference env at {root} (see /work/shared/recipes)"
    return Peer(python, root / "tv025"), ""


def stack_row(bench: str, params: int, flops: float, per_cpu: list[float], per_wall: list[float]) -> dict:
    cpu, wall = statistics.median(per_cpu), statistics.median(per_wall)
    return {
        "bench": bench,
        "params_M": params / 1e6,
        "gflop_per_update": flops / 1e9,
        "updates_per_cpu_s": cpu,
        "updates_per_s": wall,
        "gflops": cpu * flops / 1e9,
    }


def compare(
    peer: Peer | None,
    note: str,
    label: str,
    obs: str,
    overrides: dict,
    ours: dict[str, Variant],
    reps: tuple[int, int],
    rounds: int,
) -> list[dict]:
    """Alternating rounds of the peer config and each of our variants, 1 thread; medians."""
    torch.set_num_threads(1)
    flops = {k: update_flops(v) for k, v in ours.items()}
    cpu: dict[str, list[float]] = {k: [] for k in ours}
    wall: dict[str, list[float]] = {k: [] for k in ours}
    peer_answers: list[dict] = []
    for _ in range(rounds):
        if peer is not None:
            peer_answers.append(peer.measure(label, obs, overrides, reps[0]))
        for k, v in ours.items():
            w, c = rates(v.step, reps[1] * v.reps_scale, warmup=1)
            wall[k].append(w)
            cpu[k].append(c)
    rows = []
    peer_cpu = None
    if peer_answers:
        a = peer_answers[0]
        row = stack_row(
            f"LeRobot, {label}",
            a["params"],
            a["flops"],
            [x["updates_per_cpu_s"] for x in peer_answers],
            [x["updates_per_s"] for x in peer_answers],
        )
        peer_cpu = row["updates_per_cpu_s"]
        rows.append(row)
    else:
        rows.append({"bench": f"LeRobot, {label}", "updates_per_cpu_s": note})
    for k, v in ours.items():
        row = stack_row(f"robot_rl, {label}, {k}", n_params(v.sac), flops[k], cpu[k], wall[k])
        row["ratio_vs_lerobot"] = row["updates_per_cpu_s"] / peer_cpu if peer_cpu else NOT_MEASURED
        rows.append(row)
    return rows


def critic_efficiency(width: int, quick: bool) -> list[dict]:
    """Critic ensemble forward + backward alone (2 members, batch 256) against a plain bmm of its hidden GEMM, in
    the precision the learner runs it: how close the ensemble gets to what the box's matmul can do."""
    torch.set_num_threads(1)
    rows = []
    for bf16, dtype in (("off", torch.float32), ("on", torch.bfloat16)):
        sac = SAC(SACConfig(hidden=(width, width), bf16=bf16), STATE_DIM, ACT_DIM)
        feat, act = torch.randn(B, STATE_DIM), torch.rand(B, ACT_DIM)

        def step(sac: SAC = sac, feat: torch.Tensor = feat, act: torch.Tensor = act) -> None:
            with sac._precision():
                q = sac.critic(feat, act)
            q.sum().backward()

        with FlopCounterMode(display=False) as fc:
            step()
        _, cpu = rates(step, 30 if quick else 300)
        achieved = cpu * fc.get_total_flops() / 1e9
        mm = bmm_gflops(width, dtype)
        rows.append(
            {
                "bench": f"critic ensemble fwd+bwd, 2 x ({width}, {width}), bf16 {bf16}",
                "gflops": achieved,
                "bmm_gflops": mm,
                "fraction_of_bmm": achieved / mm,
            }
        )
    return rows


def compile_rows(quick: bool) -> list[dict]:
    """The visual job's learner (2 x 64 px frozen-trunk features stored as training stores them, batch 256, UTD 2,
    1 thread), eager against `sac.compile`, interleaved rounds; the compiled one's first update is its compiling
    (from inductor's cache when an earlier run compiled the same graphs)."""
    from robot_rl.buffers import ReplayBuffer

    torch.set_num_threads(1)
    sacs, batches, first_s = {}, [], {}
    for compiled in (False, True):
        sac = SAC(SACConfig(frozen_trunk=True, stored_views=4, compile=compiled), PROPRIO_DIM, ACT_DIM, CAMERAS, 64)
        sac.store_features(ReplayBuffer(2))  # the feature dtype the learner reads
        batches = batches or [make_batch(CAMERAS, 64, sac=sac) for _ in range(sac.cfg.utd)]
        t = time.perf_counter()
        sac.update(batches)
        first_s[compiled] = time.perf_counter() - t
        sacs[compiled] = sac
    cpu: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(3 if quick else 8):
        for compiled, sac in sacs.items():
            cpu[compiled].append(rates(lambda s=sac: s.update(batches), 5 if quick else 20, warmup=1)[1])
    eager, comp = statistics.median(cpu[False]), statistics.median(cpu[True])
    label = "update, 2 x 64 px stored features, batch 256, UTD 2"
    return [
        {"bench": f"{label}, eager", "updates_per_cpu_s": eager},
        {"bench": f"{label}, sac.compile", "updates_per_cpu_s": comp, "ratio_vs_eager": comp / eager,
         "first_update_s": first_s[True]},
    ]  # fmt: skip


def thread_rows(quick: bool) -> list[dict]:
    """The state update at 1, 2, ... threads, interleaved; and what `hardware.fastest_threads` picks right now."""
    cores = os.cpu_count() or 1
    counts = sorted({1, 2, cores} & set(range(1, cores + 1)))
    sac, batch = SAC(SACConfig(), STATE_DIM, ACT_DIM), make_batch((), 0)
    wall: dict[int, list[float]] = {n: [] for n in counts}
    cpu: dict[int, list[float]] = {n: [] for n in counts}
    for _ in range(3):
        for n in counts:
            torch.set_num_threads(n)
            w, c = rates(lambda: sac.update([batch]), 30 if quick else 200)
            wall[n].append(w)
            cpu[n].append(c)
    rows = [
        {
            "bench": f"state update, robot_rl defaults, {n} thread(s)",
            "updates_per_s": statistics.median(wall[n]),
            "updates_per_cpu_s": statistics.median(cpu[n]),
        }
        for n in counts
    ]
    fastest_threads.cache_clear()
    rows.append({"bench": "threads picked at start-up (hardware.fastest_threads)", "threads": fastest_threads()})
    return rows


def inference_rows(quick: bool) -> list[dict]:
    rows = []
    torch.set_num_threads(1)
    for cams, size, name in (((), 0, "state"), (CAMERAS, 64, "pixels 2x64px")):
        state_dim = PROPRIO_DIM if cams else STATE_DIM
        policy = SAC(SACConfig(), state_dim, ACT_DIM, cameras=cams, image_size=size or 64).policy
        one = {k: v[0].numpy() for k, v in make_batch(cams, size).obs.items()}
        p50, p99 = latency_ms(lambda: policy.select_action(one), 100 if quick else 1000)  # noqa: B023
        rows.append({"bench": f"actor inference {name} (select_action, 1 thread)", "p50_ms": p50, "p99_ms": p99})
    return rows


def timed(label: str, fn: Callable[[], list[dict]]) -> list[dict]:
    t = time.perf_counter()
    rows = fn()
    print(f"  [learner] {label}: {time.perf_counter() - t:.0f} s", file=sys.stderr)
    return rows


def main(quick: bool = False) -> list[dict]:
    """Per CPU-second at 1 thread (the fair per-core number); wall-clock beside it."""
    threads_before = torch.get_num_threads()
    rounds = 1 if quick else 3
    peer, note = start_peer()
    rows: list[dict] = []
    try:
        for label, overrides, hidden in STATE_COMPARISONS:
            ours = {
                f"hidden {list(hidden)}": Variant(SAC(SACConfig(hidden=hidden), STATE_DIM, ACT_DIM), (), 0),
                f"hidden {list(hidden)}, bf16 off": Variant(
                    SAC(SACConfig(hidden=hidden, bf16="off"), STATE_DIM, ACT_DIM), (), 0
                ),
            }
            reps = (20, 40) if quick else (100, 200)
            run = lambda: compare(peer, note, label, "state", overrides, ours, reps, rounds)  # noqa: B023, E731
            rows += timed(label, run)
        ours_px = {
            name: Variant(SAC(cfg, PROPRIO_DIM, ACT_DIM, cameras=CAMERAS, image_size=128), CAMERAS, 128)
            for name, cfg in (
                ("trunk trained end to end", SACConfig()),
                ("frozen trunk, features stored per frame", SACConfig(frozen_trunk=True)),
            )
        }
        for i, (label, overrides) in enumerate(PIXEL_COMPARISONS):
            reps = (1, 2) if quick else ((3, 10) if i == 0 else (10, 10))
            run = lambda: compare(peer, note, label, "pixels", overrides, ours_px, reps, rounds)  # noqa: B023, E731
            rows += timed(label, run)
    finally:
        if peer is not None:
            peer.close()
    rows += timed("critic efficiency", lambda: critic_efficiency(384, quick))
    rows += timed("compiled losses", lambda: compile_rows(quick))
    rows += timed("threads", lambda: thread_rows(quick))
    rows += inference_rows(quick)
    torch.set_num_threads(threads_before)
    return rows
