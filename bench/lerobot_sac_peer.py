"""LeRobot 0.4.4's SAC update, timed in its own environment (run by the LeRobot reference env's python, never ours).

A server on stdin/stdout, one JSON request per line, one JSON answer per line, so `bench_learner.py` can interleave
rounds of the peer with rounds of ours without paying LeRobot's import per round. A request:
`{"name": str, "obs": "state" | "pixels", "image_size": int, "overrides": {SACConfig field: value}, "reps": int,
"threads": int}`. The update is the one `lerobot/rl/learner.py` runs per optimisation step with utd_ratio=1 and
policy_update_freq=1: critic loss, backward, grad clip, Adam; actor likewise; temperature likewise; Polyak.
This file imports only torch and lerobot: it must run where robot_rl is not installed.
"""

from __future__ import annotations

import json
import sys
import time

import torch
from lerobot.configs.types import FeatureType, PolicyFeature
from lerobot.policies.sac.configuration_sac import SACConfig
from lerobot.policies.sac.modeling_sac import SACPolicy
from torch.utils.flop_counter import FlopCounterMode

B, STATE_DIM, PROPRIO_DIM, ACT_DIM, CAMERAS = 256, 13, 7, 4, ("front", "wrist")


def build(req: dict) -> tuple[SACPolicy, dict, dict]:
    pixels = req["obs"] == "pixels"
    size = req.get("image_size", 128)
    inputs = {"observation.state": PolicyFeature(FeatureType.STATE, (PROPRIO_DIM if pixels else STATE_DIM,))}
    if pixels:
        inputs.update({f"observation.images.{c}": PolicyFeature(FeatureType.VISUAL, (3, size, size)) for c in CAMERAS})
    # torch.compile is LeRobot's default; off here, as on any CPU learner that has to start in seconds (see docs).
    overrides = {"use_torch_compile": False, "device": "cpu", **req.get("overrides", {})}
    for key in ("critic_network_kwargs", "actor_network_kwargs"):
        if key in overrides:
            kind = type(getattr(SACConfig(), key))
            overrides[key] = kind(**overrides[key])
    cfg = SACConfig(
        input_features=inputs, output_features={"action": PolicyFeature(FeatureType.ACTION, (ACT_DIM,))}, **overrides
    )
    policy = SACPolicy(cfg)
    params = policy.get_optim_params()
    clip = cfg.grad_clip_norm
    # As lerobot/rl/learner.py make_optimizers_and_scheduler builds them (the temperature at the critic's rate).
    opts = {
        "actor": torch.optim.Adam(params["actor"], lr=cfg.actor_lr),
        "critic": torch.optim.Adam(params["critic"], lr=cfg.critic_lr),
        "temperature": torch.optim.Adam([params["temperature"]], lr=cfg.critic_lr),
    }

    def obs() -> dict[str, torch.Tensor]:
        o = {k: torch.randn(B, *f.shape) for k, f in inputs.items() if f.type is FeatureType.STATE}
        o.update({k: torch.rand(B, *f.shape) for k, f in inputs.items() if f.type is FeatureType.VISUAL})
        return o

    batch = {"action": torch.rand(B, ACT_DIM) * 2 - 1, "reward": torch.rand(B), "state": obs(),
             "next_state": obs(), "done": torch.zeros(B)}  # fmt: skip
    return policy, opts, {"batch": batch, "clip": clip}


def update(policy: SACPolicy, opts: dict, batch: dict, clip: float) -> None:
    """One optimisation step of lerobot/rl/learner.py (no frozen pretrained encoder, so no feature cache)."""
    for model, group, params in (
        ("critic", "critic", policy.critic_ensemble.parameters()),
        ("actor", "actor", policy.actor.parameters()),
        ("temperature", "temperature", [policy.log_alpha]),
    ):
        loss = policy.forward(batch, model=model)[f"loss_{model}"]
        opts[group].zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(parameters=params, max_norm=clip)
        opts[group].step()
    policy.update_target_networks()


def serve() -> None:
    models: dict[str, tuple] = {}
    for line in sys.stdin:
        req = json.loads(line)
        torch.set_num_threads(req.get("threads", 1))
        if req["name"] not in models:
            policy, opts, extra = build(req)
            with FlopCounterMode(display=False) as fc:
                update(policy, opts, **extra)
            n_params = sum(p.numel() for n, p in policy.named_parameters() if not n.startswith("critic_target"))
            models[req["name"]] = (policy, opts, extra, fc.get_total_flops(), n_params)
        policy, opts, extra, flops, n_params = models[req["name"]]
        update(policy, opts, **extra)  # warm-up
        reps = req.get("reps", 20)
        w, c = time.perf_counter(), time.process_time()
        for _ in range(reps):
            update(policy, opts, **extra)
        wall, cpu = reps / (time.perf_counter() - w), reps / max(time.process_time() - c, 1e-9)
        answer = {"name": req["name"], "params": n_params, "flops": flops, "updates_per_s": wall,
                  "updates_per_cpu_s": cpu, "torch": torch.__version__}  # fmt: skip
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    serve()
