"""Learner update rate at batch 256 against the peer HIL-SERL implementation, achieved GFLOP/s next to a
plain matmul of the same shape, and actor inference latency."""

from __future__ import annotations

import torch
from common import latency_ms, rates
from torch.utils.flop_counter import FlopCounterMode

from robot_rl.algos.sac import SAC, SACConfig
from robot_rl.types import Batch

# Measured on this 2-core machine for a peer PyTorch HIL-SERL learner (issue #2), updates per CPU-second.
PEER_STATE, PEER_PIXELS_128 = 21.0, 0.1
STATE_DIM, PROPRIO_DIM, ACT_DIM, B = 13, 7, 4, 256


def make_batch(cameras: tuple[str, ...], size: int) -> Batch:
    def obs() -> dict[str, torch.Tensor]:
        o = {"state": torch.randn(B, PROPRIO_DIM if cameras else STATE_DIM)}
        o.update({c: torch.randint(0, 255, (B, size, size, 3), dtype=torch.uint8) for c in cameras})
        return o

    return Batch(
        obs=obs(),
        action=torch.rand(B, ACT_DIM) * 2 - 1,
        reward=torch.rand(B),
        next_obs=obs(),
        terminated=torch.zeros(B),
        intervened=torch.zeros(B),
    )


def update_flops(sac: SAC, batch: Batch) -> int:
    with FlopCounterMode(display=False) as fc:
        sac.update([batch])
    return fc.get_total_flops()


def matmul_gflops(n: int, reps: int) -> float:
    """The critic's dominant GEMM, (n, 256, 256) x (n, 256, 256), alone."""
    x, w = torch.randn(n, B, 256), torch.randn(n, 256, 256)
    wall, _ = rates(lambda: torch.bmm(x, w), reps)
    return wall * 2 * n * B * 256 * 256 / 1e9


def main(quick: bool = False) -> list[dict]:
    """Each update config at 1 thread (the fair per-CPU-second comparison: small GEMMs scale poorly across
    cores) and at all cores (what the main job gets in wall-clock)."""
    rows = []
    reps = 20 if quick else 200
    all_cores = torch.get_num_threads()
    for threads in sorted({1, all_cores}):
        torch.set_num_threads(threads)
        for n in (2, 10):
            sac = SAC(SACConfig(n_critics=n, critic_subsample=2), STATE_DIM, ACT_DIM)
            batch = make_batch((), 0)
            flops = update_flops(sac, batch)
            wall, cpu = rates(lambda: sac.update([batch]), reps)  # noqa: B023
            achieved = wall * flops / 1e9
            mm = matmul_gflops(n, 5 * reps)
            rows.append(
                {
                    "bench": f"SAC update state, ensemble {n}, batch {B}, {threads} thread(s)",
                    "updates_per_s": wall,
                    "updates_per_cpu_s": cpu,
                    "peer_per_cpu_s": PEER_STATE,
                    "ratio_vs_peer": cpu / PEER_STATE,
                    "gflops": achieved,
                    "matmul_gflops": mm,
                    "fraction_of_matmul": achieved / mm,
                }
            )
        for size in (64, 128):
            sac = SAC(SACConfig(), PROPRIO_DIM, ACT_DIM, cameras=("front", "wrist"), image_size=size)
            batch = make_batch(("front", "wrist"), size)
            flops = update_flops(sac, batch)
            wall, cpu = rates(lambda: sac.update([batch]), 3 if quick else 15, warmup=1)  # noqa: B023
            row = {
                "bench": f"SAC update pixels 2x{size}px, batch {B}, {threads} thread(s)",
                "updates_per_s": wall,
                "updates_per_cpu_s": cpu,
                "gflops": wall * flops / 1e9,
            }
            if size == 128:
                row.update(peer_per_cpu_s=PEER_PIXELS_128, ratio_vs_peer=cpu / PEER_PIXELS_128)
            rows.append(row)
    torch.set_num_threads(all_cores)
    for cams, size, name in (((), 0, "state"), (("front", "wrist"), 64, "pixels 2x64px")):
        state_dim = PROPRIO_DIM if cams else STATE_DIM
        policy = SAC(SACConfig(), state_dim, ACT_DIM, cameras=cams, image_size=size or 64).policy
        one = {k: v[0].numpy() for k, v in make_batch(cams, size).obs.items()}
        p50, p99 = latency_ms(lambda: policy.select_action(one), 100 if quick else 1000)  # noqa: B023
        rows.append({"bench": f"actor inference {name} (select_action)", "p50_ms": p50, "p99_ms": p99})
    return rows
