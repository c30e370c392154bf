"""pi0 VLA: LoRA SFT step time, peak memory and inference latency per chunk.

CPU: the tiny config (what the tests and the CPU example train). GPU (when CUDA is present): the full-size pi0
architecture (PaliGemma 3B + Gemma 300M expert, 2 cameras at 224 px, chunk 50) with random weights and LoRA
adapters in fp32 under bf16 autocast: first with fp32 base weights at batch 8 (`fp32w`: what `robot-rl vla-sft`
runs, its optimizer's master weights stay fp32), then with the base cast to bf16 at batch 8 and 32. Synthetic
inputs: the model's cost does not depend on what the pixels show.
"""

from __future__ import annotations

import gc
import resource
import time

import numpy as np
import torch
from common import latency_ms
from transformers import PI0ForConditionalGeneration

from robot_rl.policies.vla import (
    LoraSettings,
    PI0Policy,
    PromptTokenizer,
    VLAConfig,
    apply_lora,
    full_pi0_config,
    tiny_pi0_config,
)

CAMS = ("front", "wrist")


def _obs(policy: PI0Policy, b: int, hw: int) -> dict[str, torch.Tensor]:
    dev = policy.device
    obs = {"state": torch.randn(b, policy.cfg.state_dim, device=dev)}
    for c in CAMS:
        obs[c] = torch.randint(0, 256, (b, hw, hw, 3), dtype=torch.uint8, device=dev)
    return obs


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux reports KiB


def sft_step(policy: PI0Policy, batch: int, hw: int, steps: int, bf16: bool) -> dict[str, float]:
    """Mean seconds per LoRA optimizer step (fwd + bwd + AdamW) and peak memory."""
    dev = policy.device
    params = [p for p in policy.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4)
    obs = _obs(policy, batch, hw)
    act = torch.rand(batch, policy.chunk_size, policy.cfg.action_dim, device=dev) * 2 - 1
    policy.train()

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16):
            loss = policy(policy.prepare_inputs(obs), policy.target_chunk(act))
        loss.backward()
        opt.step()

    step()  # warm-up: allocator, kernels, optimizer state
    if dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t = time.perf_counter()
    for _ in range(steps):
        step()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    s = (time.perf_counter() - t) / steps
    peak = torch.cuda.max_memory_allocated() / 2**20 if dev.type == "cuda" else _rss_mb()
    policy.eval()
    return {"step_s": s, "samples_per_s": batch / s, "peak_mb": peak}


def chunk_latency(policy: PI0Policy, hw: int, reps: int, bf16: bool) -> dict[str, float]:
    """Batch-1 latency of one chunk (prefix pass + all flow steps), p50 / p99 in ms."""
    obs = _obs(policy, 1, hw)
    noise = torch.randn(1, *policy.noise_shape, device=policy.device)
    sync = torch.cuda.synchronize if policy.device.type == "cuda" else (lambda: None)

    def run() -> None:
        with torch.autocast(policy.device.type, dtype=torch.bfloat16, enabled=bf16):
            policy.predict_full_chunk(obs, noise=noise)
        sync()

    p50, p99 = latency_ms(run, reps, warmup=3)
    return {"chunk_ms_p50": p50, "chunk_ms_p99": p99, "actions_per_chunk": policy.chunk_size}


def rl_actor_steps(policy: PI0Policy, env_steps: int) -> list[dict]:
    """Actor-side cost of RL on the frozen VLA (PickCube, 2 cameras at 32 px, state-only SAC agent): residual
    (one env step per agent step, the VLA re-plans every n_action_steps) and DSRL (one chunk per agent step).
    Time per env step, VLA inference included; the learner's SAC update on a state agent is `learner`'s row."""
    from robot_rl.algos.dsrl import DSRLConfig, NoiseEnv
    from robot_rl.algos.residual import ResidualConfig, ResidualEnv
    from robot_rl.algos.sac import SACConfig, make_policy
    from robot_rl.envs import make_env
    from robot_rl.sim.config import EnvConfig
    from robot_rl.types import ObsLayout

    rows = []
    env_cfg = EnvConfig(obs="pixels", image_size=32)
    for name, env in (
        ("residual", ResidualEnv(make_env(env_cfg, seed=0), policy, ResidualConfig(agent_cameras=False))),
        ("dsrl", NoiseEnv(make_env(env_cfg, seed=0), policy, DSRLConfig(agent_cameras=False))),
    ):
        lay = ObsLayout.of_env(env)
        state_dim, cams, size = lay.state_dim, lay.cameras, lay.image_size
        agent = make_policy(SACConfig(), state_dim, env.action_space.shape[0], cams, size or 64)
        obs, _ = env.reset(seed=0)
        done, n, t = False, 0, time.perf_counter()
        while n < env_steps:
            if done:
                obs, _ = env.reset()
            obs, _, term, trunc, info = env.step(agent.select_action(obs))
            done, n = term or trunc, n + int(info.get("chunk_length", 1))
        s = (time.perf_counter() - t) / n
        rows.append({"bench": f"tiny_cpu_{name}_actor", "env_step_ms": 1e3 * s, "env_steps_per_s": 1 / s,
                     "agent_obs": "+".join(("state", *cams)), "agent_act_dim": env.action_space.shape[0]})  # fmt: skip
    return rows


def _tiny(device: str) -> PI0Policy:
    cfg = VLAConfig(cameras=CAMS, state_dim=7, action_dim=4, n_action_steps=4, max_text_len=32)
    return PI0Policy.from_config(tiny_pi0_config(), cfg, seed=0).to(device)


def _full_gpu(dtype: torch.dtype) -> PI0Policy:
    """Full-size pi0 with LoRA, random weights made directly on the GPU, base in `dtype` (peft keeps adapters
    in fp32)."""
    cfg = VLAConfig(cameras=CAMS, state_dim=8, action_dim=7, n_action_steps=50, max_text_len=48)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = PI0ForConditionalGeneration(full_pi0_config(chunk_size=50))
    # The byte-level tokenizer is enough here: the prefix length (48 text tokens) is what costs, not the ids.
    policy = PI0Policy(model.to(dtype).eval(), PromptTokenizer.byte_level(48), cfg).cuda()
    return apply_lora(policy, LoraSettings(r=16, alpha=16))


def gpu_sft_row(bench: str, policy: PI0Policy, batch: int, steps: int) -> dict:
    name = torch.cuda.get_device_name()
    try:
        return {"bench": bench, **sft_step(policy, batch, 224, steps, bf16=True), "gpu": name}
    except torch.OutOfMemoryError:
        torch.cuda.empty_cache()
        return {"bench": bench, "skipped": "out of GPU memory", "gpu": name}


def full_param_count() -> int:
    with torch.device("meta"):
        return sum(p.numel() for p in PI0ForConditionalGeneration(full_pi0_config()).parameters())


def main(quick: bool = False) -> list[dict]:
    rows: list[dict] = []
    torch.manual_seed(0)
    np.random.seed(0)
    tiny = apply_lora(_tiny("cpu"), LoraSettings(r=8, alpha=16))
    n_train = sum(p.numel() for p in tiny.parameters() if p.requires_grad)
    n_all = sum(p.numel() for p in tiny.parameters())
    for b in (8, 32):
        r = sft_step(tiny, b, 32, steps=5 if quick else 30, bf16=False)
        rows.append({"bench": f"tiny_cpu_lora_sft_b{b}", **r, "trainable": n_train, "params": n_all})
    rows.append({"bench": "tiny_cpu_chunk_latency", **chunk_latency(tiny, 32, reps=10 if quick else 100, bf16=False)})
    rows += rl_actor_steps(_tiny("cpu"), env_steps=100 if quick else 1000)
    rows.append({"bench": "pi0_full_params", "params": full_param_count()})
    if not torch.cuda.is_available():
        rows.append({"bench": "pi0_full_gpu", "skipped": "no CUDA"})
        return rows
    steps = 3 if quick else 10
    rows.append(gpu_sft_row("pi0_full_gpu_lora_sft_fp32w_b8", _full_gpu(torch.float32), 8, steps))
    gc.collect()  # the fp32 model (13 GB) goes before the bf16 one is made
    torch.cuda.empty_cache()
    policy = _full_gpu(torch.bfloat16)
    rows += [gpu_sft_row(f"pi0_full_gpu_lora_sft_b{b}", policy, b, steps) for b in (8, 32)]
    lat = chunk_latency(policy, 224, reps=5 if quick else 30, bf16=True)
    rows.append({"bench": "pi0_full_gpu_chunk_latency", **lat, "gpu": torch.cuda.get_device_name()})
    return rows


if __name__ == "__main__":
    import json
    import os
    import sys

    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", os.cpu_count() or 1)))
    print(json.dumps(main(quick="--quick" in sys.argv), indent=1))
