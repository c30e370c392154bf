"""The prepared GPU check: one run, one JSON, every number the GPU issue asks for (`bench/gpu_check.sh`).

Sections, each timed and kept in the JSON as it finishes (a run cut short keeps what it measured; a section that
fails records its error and the rest go on):
  env        torch build, CUDA, the card, what `bf16=auto` measured
  learner    `Learner.update` (replay sampled on the device + UTD critic steps + actor step): state, 2 cameras at
             128 px with a frozen trunk and end to end; batch 256 and 1024; bf16 on and off; peak memory; whether
             an update synchronises with the host; each variant once more without the CUDA graph (`eager_rows`)
  main_job   `robot-rl train profile=gpu device=cuda` until it evaluates at 0.9
  pixel_job  the camera policy a real cell runs (`obs=pixels env.for_robot=sim`, no object pose) on the GPU, capped
             at 2 minutes
  vla        one pi0 LoRA step under bf16 autocast: every base matmul's dtype checked
  maniskill  PickCube-v1 with 256 GPU envs: env steps/s, and a short training run fed by them (`loop.num_envs`)
Only when named (`--only visual_job`, ~8 minutes):
  visual_job two camera policies trained side by side under `randomization=visual` (`--visual-set` overrides it)
             for `--visual-minutes` each (`VISUAL_MINUTES`), then the held-out visual suite on both
             (bench/bench_visual_transfer.py, 20 episodes a cell): what longer
             training under the preset buys (issue #27); the suite's table lands beside the JSON
`--tiny` runs the same code on a CPU at toy sizes (what the test suite runs).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
# The GPU issue's goals on one H100, in the order `goals` measures them.
GOALS = {
    "state learner, 10 critics, UTD 4, batch 256: critic updates/s": 3000,
    "2x128 px frozen trunk, batch 256: critic updates/s": 1500,
    "main job profile=gpu: final success": 0.9,
    "ManiSkill PickCube state, 256 GPU envs: env steps/s": 50_000,
}


SECTIONS = ("env", "learner", "vla", "maniskill", "main_job", "pixel_job")
ON_REQUEST = ("visual_job",)
VISUAL_MINUTES = 4.5  # each visual_job run's wall clock unless --visual-minutes


class Sizes:
    """What each section runs at: the real sizes on a GPU, toy ones with `--tiny`."""

    def __init__(self, tiny: bool) -> None:
        self.tiny = tiny
        self.device = "cpu" if tiny else "cuda"
        self.batches = (16, 32) if tiny else (256, 1024)
        self.image_size = 32 if tiny else 128
        self.n_critics = 2 if tiny else 10
        self.fill = 64 if tiny else 2000  # transitions in each replay buffer
        self.seconds = 0.3 if tiny else 2.0  # timed per learner row
        self.n_envs = 2 if tiny else 256


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def env_section(s: Sizes) -> dict:
    from robot_rl.hardware import bf16_is_fast

    cuda = torch.cuda.is_available()
    return {
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cuda_usable": cuda,
        "device_name": torch.cuda.get_device_name() if cuda else None,
        "bf16_supported": cuda and torch.cuda.is_bf16_supported(),
        "bf16_auto_measured_fast": bf16_is_fast(s.device),
        "python": sys.version.split()[0],
    }


def filled_learner(s: Sizes, cameras: tuple[str, ...], batch: int, bf16: str, frozen: bool,  # noqa: ANN201
                   graph: bool = True):  # fmt: skip
    """A Learner on `s.device` with `s.fill` random transitions in each buffer (frames stored as the run would)."""
    from robot_rl.algos.sac import SAC, SACConfig
    from robot_rl.buffers import ReplayBuffer
    from robot_rl.loop.learner import Learner
    from robot_rl.types import Transition

    cfg = SACConfig(n_critics=s.n_critics, utd=4, batch_size=batch, bf16=bf16, frozen_trunk=frozen, cuda_graph=graph)
    sac = SAC(cfg, 7 if cameras else 13, 4, cameras, s.image_size).to(s.device)
    demo, online = ReplayBuffer(s.fill + 2, seed=0, device=s.device), ReplayBuffer(s.fill + 2, seed=1, device=s.device)
    if frozen:
        for buf in (demo, online):
            buf.set_frame_fn(sac.policy.encoder.embed_frames)
    rng = np.random.default_rng(0)
    frames = {c: rng.integers(0, 255, (8, s.image_size, s.image_size, 3), dtype=np.uint8) for c in cameras}

    def obs(i: int) -> dict[str, np.ndarray]:
        return {"state": rng.standard_normal(sac.policy.encoder.state_mean.numel()).astype(np.float32),
                **{c: f[i % 8] for c, f in frames.items()}}  # fmt: skip

    for buf in (demo, online):
        for i in range(s.fill):
            t = Transition(obs(i), rng.uniform(-1, 1, 4).astype(np.float32), float(i % 5 == 0), obs(i + 1),
                           terminated=i % 40 == 39, truncated=False)  # fmt: skip
            buf.add(t)
    return Learner(sac, demo, online)


def learner_row(s: Sizes, name: str, cameras: tuple[str, ...], batch: int, bf16: str, frozen: bool,
                graph: bool = True) -> dict:  # fmt: skip
    learner = filled_learner(s, cameras, batch, bf16, frozen, graph)
    for _ in range(5):  # optimiser state, cuDNN's algorithm search, the CUDA graph's warm-up and capture
        learner.update()
    sync(s.device)
    if s.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    n, t = 0, time.perf_counter()
    while time.perf_counter() - t < s.seconds:
        for _ in range(5):
            learner.update()
        n += 5
        sync(s.device)
    dt = time.perf_counter() - t
    row = {"bench": f"{name}, batch {batch}, bf16 {bf16}{'' if graph else ', eager'}", "update_calls_per_s": n / dt,
           "critic_updates_per_s": 4 * n / dt}  # fmt: skip
    if s.device == "cuda":
        row["peak_mem_MiB"] = torch.cuda.max_memory_allocated() / 2**20
        torch.cuda.set_sync_debug_mode("error")
        try:
            learner.update()
            row["host_syncs_in_update"] = 0
        except RuntimeError as e:
            row["host_syncs_in_update"] = f"synchronises: {str(e).splitlines()[0]}"
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return row


def learner_section(s: Sizes) -> dict:
    cams = ("front", "wrist")
    variants = (
        (f"state learner, {s.n_critics} critics, UTD 4", (), False),
        (f"2x{s.image_size} px frozen trunk", cams, True),
        (f"2x{s.image_size} px end to end", cams, False),
    )
    rows = [learner_row(s, name, c, b, bf16, frozen)
            for name, c, frozen in variants for b in s.batches for bf16 in ("off", "on")]  # fmt: skip
    eager = [learner_row(s, name, c, s.batches[0], "off", frozen, graph=False) for name, c, frozen in variants]
    return {"rows": rows, "eager_rows": eager}


def main_job_section(s: Sizes, run_dir: Path) -> dict:
    overrides = [f"run_dir={run_dir}", "loop.stop_at_success=0.9", "loop.checkpoint_every=0"]
    if s.tiny:
        overrides += ["profile=cpu", "device=cpu", "loop.env_steps=150", "loop.eval_every=0",
                      "loop.final_eval_episodes=2", "demos.n_episodes=2"]  # fmt: skip
    else:
        overrides += ["profile=gpu", "device=cuda"]
    return train_summary(overrides)


def pixel_job_section(s: Sizes, run_dir: Path) -> dict:
    overrides = [f"run_dir={run_dir}", "obs=pixels", "env.for_robot=sim", "loop.stop_at_success=0.9",
                 "loop.eval_every=500", "loop.checkpoint_every=0"]  # fmt: skip
    if s.tiny:
        overrides += ["profile=cpu", "device=cpu", "loop.env_steps=100", "loop.eval_every=0", "env.image_size=32",
                      "sac.trunk_pretrain_steps=10", "loop.final_eval_episodes=2", "demos.n_episodes=2"]  # fmt: skip
    else:
        overrides += ["profile=gpu", "device=cuda", "loop.max_minutes=2"]
    return train_summary(overrides)


def visual_job_section(s: Sizes, work: Path, out: Path, minutes: float, extra: list[str]) -> dict:
    from bench_visual_transfer import main as visual_suite

    overrides = ["task=pick_cube", "obs=pixels", "env.for_robot=sim", "randomization=visual",
                 "loop.stop_at_success=1.1", "loop.checkpoint_every=0", "loop.final_eval_episodes=20"]  # fmt: skip
    if s.tiny:  # no compiling: a CUDA learner does not compile, and 60 env steps would pay for it
        overrides += ["profile=cpu", "device=cpu", "threads=1", "loop.env_steps=60", "loop.eval_every=0",
                      "env.image_size=32", "sac.trunk_pretrain_steps=10", "demos.n_episodes=2",
                      "sac.compile=false"]  # fmt: skip
    else:
        overrides += ["profile=gpu", "device=cuda", f"loop.max_minutes={minutes}"]
    overrides += extra
    runs = [work / f"s{seed}" for seed in (0, 1)]
    logs = [work / f"train_s{seed}.log" for seed in (0, 1)]  # a file, not a pipe: its progress bar would fill one
    work.mkdir(parents=True, exist_ok=True)  # their cwd: from the repo root `robot_rl/` would shadow the installed one
    procs = []
    for seed, (run, log) in enumerate(zip(runs, logs, strict=True)):
        cmd = [sys.executable, "-m", "robot_rl.cli", "train", *overrides, f"seed={seed}", f"run_dir={run}"]
        with log.open("w") as f:
            procs.append(subprocess.Popen(cmd, cwd=work, stdout=f, stderr=subprocess.STDOUT))
    for proc, log in zip(procs, logs, strict=True):
        if proc.wait() != 0:
            raise RuntimeError(f"training failed: {log.read_text()[-1500:]}")
    keys = ("final_success_rate", "final_success_rate_randomized", "wall_clock_s", "env_steps", "critic_updates")
    summaries = [json.loads((run / "summary.json").read_text()) for run in runs]
    rows = visual_suite(episodes=1 if s.tiny else 20, checkpoints=tuple(runs), out=out, expert=False)
    return {"overrides": overrides, "runs": [{k: x.get(k) for k in keys} for x in summaries], "suite": rows}


def train_summary(overrides: list[str]) -> dict:
    from robot_rl.config import load_config
    from robot_rl.loop.trainer import train

    summary = json.loads(train(load_config(overrides)).read_text())
    keys = ("final_success_rate", "wall_clock_s", "env_steps", "updates", "critic_updates", "device")
    return {k: summary[k] for k in keys} | {"overrides": overrides}


def vla_section(s: Sizes) -> dict:
    """One LoRA step of a tiny random-init pi0 under bf16 autocast, fp32 master weights (what `vla-sft` runs):
    the dtypes every base `nn.Linear` produced."""
    from robot_rl.policies.vla import LoraSettings, PI0Policy, VLAConfig, apply_lora, tiny_pi0_config

    cfg = VLAConfig(cameras=("front", "wrist"), state_dim=7, action_dim=4, n_action_steps=4, max_text_len=32)
    policy = apply_lora(PI0Policy.from_config(tiny_pi0_config(), cfg, seed=0), LoraSettings()).to(s.device)
    dtypes: list[torch.dtype] = []
    for m in policy.modules():
        if type(m) is torch.nn.Linear:
            m.register_forward_hook(lambda _m, _i, out: dtypes.append(out.dtype))
    b = 2
    obs = {"state": torch.randn(b, 7, device=s.device)}
    obs |= {c: torch.randint(0, 256, (b, 32, 32, 3), dtype=torch.uint8, device=s.device) for c in cfg.cameras}
    act = torch.rand(b, policy.chunk_size, 4, device=s.device) * 2 - 1
    opt = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=1e-4)
    policy.train()
    t = time.perf_counter()
    with torch.autocast(s.device, dtype=torch.bfloat16):
        loss = policy(policy.prepare_inputs(obs), policy.target_chunk(act))
    loss.backward()
    opt.step()
    sync(s.device)
    counts = {str(d): dtypes.count(d) for d in set(dtypes)}
    return {"step_s": time.perf_counter() - t, "loss": float(loss), "base_linear_output_dtypes": counts,
            "all_bf16": set(dtypes) == {torch.bfloat16}}  # fmt: skip


def maniskill_section(s: Sizes, run_dir: Path) -> dict:
    from robot_rl.sim.maniskill import ManiSkillVecEnv, vulkan_available

    ok, why = vulkan_available()
    if not ok:
        return {"skipped": why}
    vec = ManiSkillVecEnv("PickCube-v1", s.n_envs, backend="cpu" if s.tiny else "gpu")
    rng = np.random.default_rng(0)
    vec.reset(seed=0)
    steps, t = 0, time.perf_counter()
    while time.perf_counter() - t < (1.0 if s.tiny else 10.0):
        _, _, term, trunc, _ = vec.step(rng.uniform(-1, 1, (vec.num_envs, vec.action_dim)))
        if (done := np.flatnonzero(term | trunc)).size:
            vec.reset(env_idx=done)
        steps += vec.num_envs
    rate = steps / (time.perf_counter() - t)
    vec.close()
    return {"envs": s.n_envs, "backend": vec.backend, "env_steps_per_s": rate, "training": maniskill_run(s, run_dir)}


def maniskill_run(s: Sizes, run_dir: Path) -> dict:
    """A short training run fed by `s.n_envs` batched envs (`loop.num_envs`), scripted demos, state obs."""
    from robot_rl.config import load_config
    from robot_rl.loop.trainer import train

    overrides = [f"run_dir={run_dir}", "sim=maniskill", "task=PickCube-v1", f"loop.num_envs={s.n_envs}",
                 "intervention.enabled=false", "loop.checkpoint_every=0", "loop.eval_every=0",
                 f"device={s.device}"]  # fmt: skip
    if s.tiny:
        overrides += ["profile=cpu", "loop.env_steps=120", "loop.final_eval_episodes=2", "demos.n_episodes=2"]
    else:
        overrides += ["profile=gpu", "loop.env_steps=25600", "loop.max_minutes=1.5", "loop.final_eval_episodes=20"]
    summary = json.loads(train(load_config(overrides)).read_text())
    keys = ("final_success_rate", "wall_clock_s", "env_steps", "updates", "device")
    return {k: summary[k] for k in keys} | {"env_steps_per_s": summary["env_steps"] / summary["wall_clock_s"]}


def run(
    out: Path, tiny: bool, only: list[str] | None = None, visual: tuple[float, list[str]] = (VISUAL_MINUTES, [])
) -> dict:
    s = Sizes(tiny)
    result: dict = {"tiny": tiny, "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as tmp:  # the runs' folders: 1.7 GB, gone at the end
        return _run_sections(s, result, out, Path(tmp), only, visual)


def _run_sections(s: Sizes, result: dict, out: Path, work: Path, only: list[str] | None,
                  visual: tuple[float, list[str]]) -> dict:  # fmt: skip
    sections: dict[str, Callable[[], dict]] = {
        "env": lambda: env_section(s),
        "learner": lambda: learner_section(s),
        "vla": lambda: vla_section(s),
        "maniskill": lambda: maniskill_section(s, work / "maniskill"),
        "main_job": lambda: main_job_section(s, work / "main_job"),
        "pixel_job": lambda: pixel_job_section(s, work / "pixel_job"),
        "visual_job": lambda: visual_job_section(s, work / "visual_job", out.parent, *visual),
    }
    for name, fn in sections.items():
        if (only and name not in only) or (not only and name in ON_REQUEST):
            continue
        t = time.perf_counter()
        try:
            result[name] = fn()
        except Exception as e:  # one section's failure is a finding; the others still run
            result[name] = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-2000:]}
        result[name]["seconds"] = round(time.perf_counter() - t, 1)
        print(f"[gpu_check] {name}: {result[name]['seconds']} s", file=sys.stderr)
        out.write_text(json.dumps(result, indent=1, default=str))
    result["goals"] = goals(result)
    out.write_text(json.dumps(result, indent=1, default=str))
    return result


def goals(r: dict) -> dict:
    """Each goal of the issue against what this run measured (None: not measured here; `--tiny` measures none)."""
    if r["tiny"]:
        return {k: {"goal": g, "measured": None, "met": None} for k, g in GOALS.items()}

    def rate(prefix: str) -> float | None:
        rows = r.get("learner", {}).get("rows", [])
        return max((x["critic_updates_per_s"] for x in rows if x["bench"].startswith(prefix)), default=None)

    ms = r.get("maniskill", {})
    measured = dict(zip(GOALS, (
        rate("state learner, 10 critics, UTD 4, batch 256"),
        rate("2x128 px frozen trunk, batch 256"),
        r.get("main_job", {}).get("final_success_rate"),
        ms.get("env_steps_per_s") if ms.get("envs") == 256 else None,
    ), strict=True))  # fmt: skip
    return {k: {"goal": GOALS[k], "measured": v, "met": None if v is None else v >= GOALS[k]}
            for k, v in measured.items()}  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tiny", action="store_true", help="toy sizes on the CPU: checks the script, measures nothing")
    p.add_argument("--out", type=Path, default=HERE / "results" / "gpu_check.json")
    p.add_argument("--only", nargs="+", choices=SECTIONS + ON_REQUEST, help="run these sections alone")
    p.add_argument("--visual-minutes", type=float, default=VISUAL_MINUTES, help="visual_job: each run's wall clock")
    p.add_argument("--visual-set", nargs="*", default=[], help="visual_job: train overrides, e.g. a wider preset")
    args = p.parse_args()
    if not args.tiny and not torch.cuda.is_available():
        print(f"gpu_check: no usable GPU (torch {torch.__version__}, CUDA {torch.version.cuda}); --tiny runs on CPU",
              file=sys.stderr)  # fmt: skip
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    r = run(args.out, args.tiny, args.only, (args.visual_minutes, args.visual_set))
    failed = [k for k, v in r.items() if isinstance(v, dict) and "error" in v]
    print(json.dumps(r["goals"], indent=1))
    print(f"wrote {args.out}" + (f"; sections with errors: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
