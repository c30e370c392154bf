"""Visual transfer (issues #27, #54): camera policies on scenes *outside* what the visual preset draws.

Two sets of cells beside the nominal scene. The validation suite, fixed: each cell pins RandomizationConfig fields
(`SHIFTS`, all here, each outside configs/randomization/visual.yaml's range: tests/sim/test_visual_suite.py checks
it); what it shows was looked at while developing, so it is no test set. The fresh test set: `--cells` cells drawn at
run time from `--cells-seed` (default: drawn now and printed), every factor outside the training ranges at once
(`robot_rl.sim.cells`, the cells `robot-rl sim-robot --cell random:SEED` serves; in-process, with the sizes of their
camera moves fixed and the directions drawn per episode, and without their latency and stream jitter), then each
factor family of them alone (`FAMILIES`: cameras, lights, colours, distractors, image pipeline, physics; a family's
episodes split across the drawn cells), so the table says which factor a policy loses to. And per camera, the
nominal scene with that camera's frames blanked: how much the policy leans on it. The checkpoint's own training
randomisation is dropped, only what shapes its observation kept (`nominal`). Every cell runs the same episode seeds,
and the visual draws never touch the physics draws (sim/randomization.py), so the object starts where it does in the
nominal cell. The scripted expert runs every cell as a control row (on the policy's late view for the stale frame):
where it fails, the cell is not solvable as posed. Cells report success with a Wilson 95 % CI and kept = shifted /
nominal success of the same policy with a bootstrap 95 % CI.

Run: `.venv/bin/python bench/bench_visual_transfer.py [--checkpoint RUN_OR_CKPT ...] [--seeds 2] [--episodes 40]
[--preset visual] [--minutes 15] [--set KEY=VALUE ...] [--cells 5] [--cells-seed S] [--keep DIR] [--quick]`; also
`bench/run.py --only visual_transfer`.
Without checkpoints it trains `obs=pixels env.for_robot=sim` PickCube runs with the preset, one per seed, side by
side for `--minutes` of wall clock (#27's acceptance 1: two seeds, 15 minutes, this 2-core box), then runs the suite
on them; `--set` passes an override to their `train` (a learner variant: `--set sac.utd=1`). `--quick`: the expert
alone, 2 episodes a cell, 2 fresh cells (a smoke run). Writes `bench/results/visual_transfer.json` and `.md`; every
fresh row holds its cell (`drawn`) and the cells seed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from common import episodes as per_episode
from common import kept_ci, wilson

HERE = Path(__file__).resolve().parent
SEED = 2_000_000  # first episode seed, as `robot-rl eval` and `robot-rl deploy` use
# The validation suite: field -> value of each cell; `visual` entries are VisualConfig fields. After each: the
# preset's range.
SHIFTS: dict[str, dict] = {
    "front camera moved 5 cm": {"visual": {"camera_shift": (0.05, 0.05)}},  # 0 .. 3 cm
    "wrist camera moved 2 cm": {"visual": {"hand_camera_shift": (0.02, 0.02)}},  # 0 .. 1.5 cm
    "camera turned 0.15 rad": {"visual": {"camera_turn": (0.15, 0.15)}},  # 0 .. 0.08 rad
    "field of view +12 deg": {"visual": {"fovy": (12.0, 12.0)}},  # +-5 deg
    "lights x0.4": {"visual": {"light_intensity": (0.4, 0.4)}},  # 0.6 .. 1.3
    "lights x1.8": {"visual": {"light_intensity": (1.8, 1.8)}},
    "light tilted 1 rad": {"visual": {"light_tilt": (1.0, 1.0)}},  # 0 .. 0.6 rad
    "two extra lights": {"visual": {"extra_lights": (2, 2)}},  # 0 .. 1
    "green table": {"visual": {"table_rgb": (0.25, 0.5, 0.3)}},  # brown +-0.2 a channel
    "blue cube": {"visual": {"object_rgb": (0.15, 0.3, 0.85)}},  # red +-0.2
    "orange robot": {"visual": {"robot_rgb": (0.95, 0.5, 0.1)}},  # white +-0.2
    "three distractors": {"visual": {"distractors": (3, 3)}},  # 0 .. 2
    "noise sigma 12": {"visual": {"noise_std": (12.0, 12.0)}},  # 0 .. 6
    "blur sigma 1.6 px": {"visual": {"blur_sigma": (1.6, 1.6)}},  # 0 .. 0.8 px
    "exposure x1.6": {"visual": {"exposure": (1.6, 1.6)}},  # 0.75 .. 1.25
    "stale frame": {"obs_delay": 1},  # none
}
# Cells that change what a policy sees of time, not of the scene: the expert's control row reads the same late view.
STALE_VIEW_SHIFTS = ("stale frame",)


def randomization(base, fields: dict):
    """`base`'s observation-shaping fields on the nominal scene, plus the cell's `fields`."""
    from robot_rl.sim.config import VisualConfig, nominal

    fields = dict(fields)
    if "visual" in fields:
        fields["visual"] = VisualConfig(**fields["visual"])
    return nominal(base, **fields)


def train(runs: list[Path], preset: str, threads: int, minutes: float, overrides: tuple[str, ...] = ()) -> list[dict]:
    """`obs=pixels env.for_robot=sim` PickCube runs with the preset, seed i in `runs[i]`, side by side: as acceptance 1
    of #27 measures them, `minutes` of wall clock each, start-up included (the clock, not a step budget or early stop,
    ends them). An evaluation every 5000 env steps, not 1000: with no early stop they only draw the curve, and at 40
    episodes each they took up to a sixth of the clock. `threads` 0: the cores split between the runs; `overrides`
    come last. Returns their summaries; each run's output is in `<run>.log` beside it."""
    threads = threads or max(1, (os.cpu_count() or 1) // len(runs))
    procs = []
    for seed, run_dir in enumerate(runs):
        cmd = [sys.executable, "-m", "robot_rl.cli", "train", "task=pick_cube", "obs=pixels", "env.for_robot=sim",
               f"randomization={preset}", f"run_dir={run_dir}", f"seed={seed}", f"threads={threads}",
               f"loop.max_minutes={minutes}", "loop.env_steps=200000", "loop.stop_at_success=2",
               "loop.eval_every=5000", "loop.checkpoint_every=0", *overrides]  # fmt: skip
        with open(run_dir.with_suffix(".log"), "w") as log:
            procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT))
    for p, run_dir in zip(procs, runs, strict=True):
        if p.wait():
            tail = run_dir.with_suffix(".log").read_text()[-2000:]
            raise RuntimeError(f"training {run_dir} failed (exit {p.returncode}):\n{tail}")
    keys = ("seed", "env_steps", "startup_s", "wall_clock_s", "final_success_rate")
    return [{k: json.loads((r / "summary.json").read_text())[k] for k in keys} for r in runs]


def cell(env_cfgs: list, policy_for, episodes: int, blank: tuple[str, ...] = ()) -> list[bool]:
    """`episodes` rollouts on the episode seeds from `SEED`, split in equal runs across `env_cfgs` (a family's
    drawn cells), so every cell is paired episode by episode with the nominal one."""
    from robot_rl.envs import make_env
    from robot_rl.evaluation import BlankCameras, rollout

    got = []
    for i, env_cfg in enumerate(env_cfgs):
        env = make_env(env_cfg)
        env = BlankCameras(env, blank) if blank else env
        try:
            policy = policy_for(env)
            chunk = range(i * episodes // len(env_cfgs), (i + 1) * episodes // len(env_cfgs))
            got += [rollout(env, policy, SEED + ep).success for ep in chunk]
        finally:
            env.close()
    return got


def cells(base, fresh: list[tuple[str, dict]], stale_view: bool) -> list[tuple[str, str, list, tuple[str, ...]]]:
    """(suite, shift, randomizations, blanked cameras) of every cell for a policy trained with `base` (an
    EnvConfig): nominal, each camera blanked, the validation suite, the fresh cells whole, then each factor family
    of the fresh cells alone (the episodes split across the drawn cells); for the stale-view expert, nominal and
    `STALE_VIEW_SHIFTS`."""
    from robot_rl.sim.cells import FAMILIES, cell_randomization

    nominal = [randomization(base.randomization, {})]
    validation = [("validation", s, [randomization(base.randomization, f)], ()) for s, f in SHIFTS.items()]
    if stale_view:
        return [("nominal", "nominal", nominal, ()), *(c for c in validation if c[1] in STALE_VIEW_SHIFTS)]
    families = [("fresh family", f"fresh {family}", [cell_randomization(c, base.randomization, family)
                 for _, c in fresh], ()) for family in FAMILIES]  # fmt: skip
    return [("nominal", "nominal", nominal, ()),
            *(("blanked", f"blanked {c}", nominal, (c,)) for c in base.cameras),
            *validation,
            *(("fresh", spec, [cell_randomization(c, base.randomization)], ()) for spec, c in fresh),
            *(families if fresh else [])]  # fmt: skip


def measure(name: str, ckpt: Path | None, episodes: int, stale_view: bool = False,
            fresh: list[tuple[str, dict]] = (), cells_seed: int | None = None) -> list[dict]:  # fmt: skip
    """Every cell (`cells`) of one checkpoint or, with None, the expert on a camera env (it reads the simulator, but
    the shifted scenes are rendered all the same)."""
    from robot_rl.checkpoint import Checkpoint
    from robot_rl.sim import EnvConfig, ExpertPolicy

    if ckpt is None:
        base, policy_for = EnvConfig(obs="pixels"), (lambda env: ExpertPolicy(env, stale_view))  # noqa: E731
    else:
        checkpoint = Checkpoint(ckpt)
        policy, cfg = checkpoint.policy(), checkpoint.cfg
        base, policy_for = cfg.env, (lambda env: policy)  # noqa: E731
    rows, at_nominal, drawn = [], [], dict(fresh)
    for suite, shift, rands, blank in cells(base, list(fresh), stale_view):
        got = cell([dataclasses.replace(base, randomization=r) for r in rands], policy_for, episodes, blank)
        at_nominal = at_nominal or got
        k = sum(got)
        lo, hi = wilson(k, episodes)
        klo, khi = kept_ci(at_nominal, got)
        kept = np.mean(got) / max(np.mean(at_nominal), 1e-9)
        rows.append({"bench": f"{name} {shift}", "policy": name, "suite": suite, "shift": shift, "episodes": episodes,
                     "success": k / episodes, "ci_lo": lo, "ci_hi": hi, "kept": float(kept), "kept_ci_lo": klo,
                     "kept_ci_hi": khi, "per_episode": per_episode(got, SEED)})  # fmt: skip
        if suite == "fresh":
            rows[-1] |= {"cells_seed": cells_seed, "drawn": drawn[shift]}
        elif suite == "fresh family":
            rows[-1] |= {"cells_seed": cells_seed, "drawn": list(drawn)}
        print(f"  {name} {shift}: {k}/{episodes} kept {kept:.2f} [{klo:.2f}, {khi:.2f}]", file=sys.stderr, flush=True)
    return rows


def to_markdown(rows: list[dict]) -> str:
    policies = list(dict.fromkeys(r["policy"] for r in rows if "policy" in r))
    cells = {(r["policy"], r["shift"]): r for r in rows if "policy" in r}
    trained = {r["bench"].removesuffix(" training"): r for r in rows if "policy" not in r}
    seeds = {r["cells_seed"] for r in rows if "cells_seed" in r}
    out = ["success [95 % CI] / kept [95 % CI]" + "".join(f"; fresh cells seed {s}" for s in seeds), "",
           "| suite | shift | " + " | ".join(policies) + " |", "|---" * (len(policies) + 2) + "|"]  # fmt: skip
    if trained:
        line = [
            f"{trained[p]['env_steps']} / {trained[p]['final_success_rate']:.2f}" if p in trained else ""
            for p in policies
        ]
        out.append("| | env steps trained / final nominal | " + " | ".join(line) + " |")
    for suite, shift in dict.fromkeys((r["suite"], r["shift"]) for r in rows if "policy" in r):
        line = [suite, shift]
        for p in policies:
            r = cells.get((p, shift))
            line.append("" if r is None else f"{r['success']:.2f} [{r['ci_lo']:.2f}, {r['ci_hi']:.2f}] / "
                        f"{r['kept']:.2f} [{r['kept_ci_lo']:.2f}, {r['kept_ci_hi']:.2f}]")  # fmt: skip
        out.append("| " + " | ".join(line) + " |")
    return "\n".join(out)


def main(quick: bool = False, episodes: int = 0, checkpoints: tuple[Path, ...] = (), seeds: int = 2,
         preset: str = "visual", minutes: float = 15.0, threads: int = 0,
         out: Path | None = None, expert: bool = True, overrides: tuple[str, ...] = (), cells: int = 5,
         cells_seed: int | None = None, keep: Path | None = None) -> list[dict]:  # fmt: skip
    """The expert rows (unless not `expert`) and one column per checkpoint; without checkpoints (and not `quick`),
    `seeds` runs trained with `preset` (and `overrides`) first, in `keep` (kept, for a later `--checkpoint`) or a
    temporary folder. `cells` fresh cells from `cells_seed` (None: drawn
    now; `quick`: 2 cells)."""
    from robot_rl.sim.cells import draw_cells

    episodes = episodes or (2 if quick else 40)
    cells_seed = secrets.randbelow(2**31) if cells_seed is None else cells_seed
    fresh = draw_cells(2 if quick else cells, cells_seed)
    print(f"[bench] visual_transfer: fresh cells seed {cells_seed} (--cells-seed {cells_seed} reruns them): "
          f"{[spec for spec, _ in fresh]}", file=sys.stderr, flush=True)  # fmt: skip
    rows, trained = [], []
    if expert:
        rows = measure("expert", None, episodes, fresh=fresh, cells_seed=cells_seed)
        rows += measure("expert, stale view", None, episodes, stale_view=True)
    with tempfile.TemporaryDirectory(prefix="visual_transfer_") as tmp:
        runs = list(checkpoints)
        if not runs and not quick:
            folder = keep or Path(tmp)
            folder.mkdir(parents=True, exist_ok=True)
            runs = [folder / f"s{s}" for s in range(seeds)]
            trained = train(runs, preset, threads, minutes, overrides)
        # What each run bought in its minutes (env steps, start-up, final nominal success), beside its cells.
        rows += [{"bench": f"{preset} s{t['seed']} training", **t} for t in trained]
        for i, ckpt in enumerate(runs):
            name = f"{preset} s{i}" if not checkpoints else f"{Path(ckpt).name}"
            rows += measure(name, Path(ckpt), episodes, fresh=fresh, cells_seed=cells_seed)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        doc = {
            "shifts": SHIFTS,
            "cells_seed": cells_seed,
            "fresh_cells": dict(fresh),
            "checkpoints": [str(c) for c in checkpoints],
            "trained": trained,
            "overrides": list(overrides),
            "episodes": episodes,
            "rows": rows,
        }
        (out / "visual_transfer.json").write_text(json.dumps(doc, indent=1))
        (out / "visual_transfer.md").write_text(to_markdown(rows) + "\n")
    return rows


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--episodes", type=int, default=0, help="per cell (default 40, --quick 2)")
    p.add_argument("--checkpoint", action="append", type=Path, default=[], help="a run dir or checkpoint folder")
    p.add_argument("--seeds", type=int, default=2, help="runs to train when no --checkpoint is given")
    p.add_argument("--preset", default="visual", help="their randomisation preset")
    p.add_argument("--minutes", type=float, default=15.0, help="wall clock of each training run (side by side)")
    p.add_argument("--threads", type=int, default=0, help="torch threads of each run (0: the cores split)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="an override for the training runs")
    p.add_argument("--cells", type=int, default=5, help="fresh cells drawn at run time (--quick: 2)")
    p.add_argument("--cells-seed", type=int, default=None, help="the fresh cells' seed (default: drawn now, printed)")
    p.add_argument("--keep", type=Path, default=None, help="train the runs into this folder and keep them")
    p.add_argument("--out", type=Path, default=HERE / "results")
    a = p.parse_args()
    from common import provenance, run_name, write_run

    started = time.time()
    result = main(a.quick, a.episodes, tuple(a.checkpoint), a.seeds, a.preset, a.minutes, a.threads, a.out,
                  overrides=tuple(a.set), cells=a.cells, cells_seed=a.cells_seed, keep=a.keep)  # fmt: skip
    print(to_markdown(result))
    tag = "quick" if a.quick else "checkpoints" if a.checkpoint else "full"
    print(write_run(a.out, "visual_transfer", run_name(tag, started), {"argv": sys.argv[1:]}, result, started,
                    time.time() - started, provenance()))  # fmt: skip
