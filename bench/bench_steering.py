"""Diffusion policy inference latency (DDIM 5/10/20 steps, chunk 8 and 16) and the residual / DSRL learner update
rates next to plain SAC on the same state task: the adapters must cost the learner nothing extra per update."""

from __future__ import annotations

import torch
from common import latency_ms, rates

from robot_rl.algos.sac import SAC, SACConfig
from robot_rl.policies.chunked import ChunkPolicyConfig, make_chunk_policy
from robot_rl.types import Batch

STATE_DIM, ACT_DIM, B = 13, 4, 256


def sac_batch(state_dim: int, act_dim: int) -> Batch:
    return Batch(
        obs={"state": torch.randn(B, state_dim)},
        action=torch.rand(B, act_dim) * 2 - 1,
        reward=torch.rand(B),
        next_obs={"state": torch.randn(B, state_dim)},
        terminated=torch.zeros(B),
        intervened=torch.zeros(B),
    )


def main(quick: bool = False) -> list[dict]:
    torch.manual_seed(0)
    rows = []
    reps = 10 if quick else 50
    device = "cuda" if torch.cuda.is_available() else "cpu"
    for threads in sorted({1, torch.get_num_threads()}):
        torch.set_num_threads(threads)
        for horizon in (8, 16):
            for steps in (5, 10, 20):
                cfg = ChunkPolicyConfig(horizon=horizon, n_action_steps=horizon // 2, num_inference_steps=steps)
                policy = make_chunk_policy(cfg, STATE_DIM, ACT_DIM).eval().to(device)
                obs = {"state": torch.randn(1, cfg.n_obs_steps, STATE_DIM, device=device)}
                with torch.no_grad():
                    p50, p99 = latency_ms(lambda: policy.predict_action_chunk(obs), reps)  # noqa: B023
                rows.append({"bench": f"diffusion chunk {horizon}, DDIM {steps}", "device": device,
                             "threads": threads, "p50_ms": p50, "p99_ms": p99,
                             "per_action_ms": p50 / cfg.n_action_steps})  # fmt: skip
        # One agent update (2 critic steps + actor) for each algorithm's shapes: plain SAC acts in Da, residual
        # SAC sees the base action in its state, DSRL acts in the (horizon x Da) noise space.
        horizon = ChunkPolicyConfig().horizon
        shapes = {"sac": (STATE_DIM, ACT_DIM), "residual": (STATE_DIM + ACT_DIM, ACT_DIM),
                  "dsrl": (STATE_DIM, horizon * ACT_DIM)}  # fmt: skip
        base_rate = None
        for name, (sd, ad) in shapes.items():
            sac = SAC(SACConfig(), sd, ad).to(device)
            batches = [sac_batch(sd, ad).to(device)] * 2
            wall, cpu = rates(lambda: sac.update(batches), 4 * reps)  # noqa: B023
            base_rate = base_rate or wall
            rows.append({"bench": f"{name} update (utd 2, batch {B})", "device": device, "threads": threads,
                         "updates_per_s": wall, "updates_per_cpu_s": cpu, "vs_sac": wall / base_rate})  # fmt: skip
    return rows
