"""From the simulator onto the robot (issue #28): on the stand-in cell (`robot-rl sim-robot --cell standin`, real
time, both cameras), from cameras + proprio with the classifier's reward and the simulated operator:

(a) scratch: today's HIL-SERL loop (bench_robot_loop.py's, in real time): robot demos, no sim;
(b) zero-shot: the sim camera checkpoint (`obs=pixels env.for_robot=sim randomization=visual`) through `deploy`;
(c) fine-tuned: (a)'s run started from that checkpoint (`init_from`); its step-0 evaluation is the sim policy too.
    Its first `WARMUP` env steps make no updates: the sim policy fills the replay buffer on the cell (and the
    classifier's refits see its frames) before the critic and actor move (WSRL's warm-up; measured against
    updates from step 0 with `--choices`).

Every training run evaluates at env step 0 (`loop.eval_at_start`), every `eval_every` env steps within a robot-minute
budget, and stops at the goal. Success is the sim robot's own check (evaluation only); the reward is the
classifier's alone, trained on the simulated operator's labelled demos collected on the cell. Robot time = training
env steps / 10 Hz; evaluations' robot time is reported beside it. Seeds vary the robot runs and the evaluation
episodes; the sim checkpoint is one (`--checkpoint`, else trained here). `--choices` adds one seed each of the
issue's measured choices: (c) with the sim run's demos in place of the robot's, (c) updating from step 0, and (c)
whose critic learns alone for its first `CRITIC_WARMUP` updates.
(c)'s goal is per seed: 0.9 within 10 robot-minutes and within a third of the same seed's (a), whose budget stands
in for its time where it never gets there.

Run: `.venv/bin/python bench/bench_sim_to_robot.py [--quick] [--checkpoint RUN] [--seeds 2] [--scratch-steps N]
[--finetune-steps N] [--choices]`; also `bench/run.py --only sim_to_robot`. Writes
`bench/results/sim_to_robot[_quick]/` (sim_to_robot.json, .md, curve.png). Finished stages are kept there with the
parameters they ran with (`<output>.params.json`): run again (say with `--choices`), it runs only what is missing or
was made with other parameters (one line says which).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from common import cli, record, reusable

os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
HERE = Path(__file__).resolve().parent
HZ = 10.0
GOAL, GOAL_MINUTES = 0.9, 10.0  # (c) >= 0.9 within 10 robot-minutes and a third of (a)'s; (b) >= 0.6
ZERO_SHOT_GOAL = 0.6
CELL = "standin"
WARMUP = 200  # (c)'s env steps without updates (the sim policy collecting on the cell first)
CRITIC_WARMUP = 200  # updates that train the critic alone in the "critic warm-up" choice
TICKS_HZ = 100.0  # the sim robot's physics rate: its tick count / this is the robot time it served
# The classifier's threshold at least this, and its refits every 10 verdicts (PegInsert's, #29): at its own
# threshold and rarer refits the classifier paid for many false successes, and a sim policy fine-tuned on them
# stalled where one fine-tuned on the sim robot's success keys did not (docs/log/benchmarks.md, "Sim to robot":
# lockstep screens on the cell).
THRESHOLD_FLOOR = 0.8
REFIT = (10, 100)  # reward.refit_every, reward.refit_steps


class Cell:
    """`robot-rl sim-robot --cell standin --cameras front,wrist` in real time on its own domain, for one stage."""

    def __init__(self) -> None:
        self.domain = random.randint(100, 230)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "robot_rl.cli", "sim-robot", "--cell", CELL, "--cameras", "front,wrist",
             "--domain", str(self.domain)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    def __enter__(self) -> Cell:
        return self

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        _, err = self.proc.communicate(timeout=60)
        found = re.search(r"stopped after (\d+) ticks", err)
        self.robot_s = int(found.group(1)) / TICKS_HZ if found else 0.0


def robot_args(domain: int, quick: bool) -> list[str]:
    """A real-time robot run from both cameras + proprio (bench_robot_loop.py's settings, without lockstep)."""
    return ["robot=sim", f"robot.domain_id={domain}", "obs=pixels", "threads=1", "loop.buffer_capacity=4000",
            "robot.safety.workspace_lo=[0.38,-0.2,0.01]", "robot.safety.workspace_hi=[0.62,0.2,0.25]",
            f"sac.trunk_pretrain_steps={10 if quick else 200}", "loop.checkpoint_every=0"]  # fmt: skip


def train_sim(run: Path, quick: bool, minutes: float) -> tuple[Path, dict]:
    """The sim camera run for the robot's layout, visual preset on, and its parameters; kept when it finished with
    the same ones."""
    size = ["loop.env_steps=20", "loop.eval_every=0", "loop.final_eval_episodes=1", "demos.n_episodes=2",
            "sac.trunk_pretrain_steps=10"] if quick else [f"loop.max_minutes={minutes}"]  # fmt: skip
    args = ["task=pick_cube", "obs=pixels", "env.for_robot=sim", "randomization=visual", "threads=1",
            "loop.checkpoint_every=0", *size]  # fmt: skip
    params = {"train": args}
    if reusable(run, params, "the sim run") and (run / "summary.json").exists():
        return run, params
    shutil.rmtree(run, ignore_errors=True)
    cli("train", *args, f"run_dir={run}")
    record(run, params)
    return run, params


def robot_run(run: Path, ckpt: Path | None, seed: int, steps: int, store: Path, clf: Path, threshold: float,
              quick: bool, *extra: str, upstream: dict) -> dict:  # fmt: skip
    """One real-time training run on the cell, from scratch or from `ckpt`; its summary and robot seconds served
    (kept in the run dir: a finished run is not run again when the bench is, unless its parameters, `upstream`'s
    (the sim run's, the demos' and classifier's) included, changed)."""
    params = {"checkpoint": str(ckpt) if ckpt else None, "seed": seed, "steps": steps, "demos": str(store),
              "threshold": threshold, "quick": quick, "extra": list(extra), "robot": robot_args(0, quick)[2:],
              "refit": list(REFIT), "goal": GOAL, **upstream}  # fmt: skip
    return kept(
        run / "bench.json",
        params,
        f"the run {run.name}",
        lambda: _robot_run(run, ckpt, seed, steps, store, clf, threshold, quick, *extra),
    )


def _robot_run(run: Path, ckpt: Path | None, seed: int, steps: int, store: Path, clf: Path, threshold: float,
               quick: bool, *extra: str) -> dict:  # fmt: skip
    every = ["loop.eval_every=10", "loop.final_eval_episodes=1", "loop.eval_episodes=1"] if quick else [
        f"loop.eval_every={max(steps // 4, 100)}", "loop.eval_episodes=10", "loop.eval_robot_minutes=0.9",
        "loop.final_eval_episodes=20", "loop.final_eval_robot_minutes=0.7"]  # fmt: skip
    shutil.rmtree(run, ignore_errors=True)  # a run of other parameters, or one cut short, starts again
    run.mkdir(parents=True)
    t = time.perf_counter()
    with Cell() as cell:
        cli("train", *robot_args(cell.domain, quick), f"run_dir={run}", f"seed={seed}", f"loop.env_steps={steps}",
            f"demos.path={store}", "reward.source=classifier", f"reward.classifier_path={clf}",
            f"reward.threshold={threshold}", f"reward.refit_every={REFIT[0]}", f"reward.refit_steps={REFIT[1]}",
            "intervention.device=simulated", "intervention.trigger=no_progress",
            "intervention.patience=5",
            "loop.eval_at_start=true", f"loop.stop_at_success={GOAL}", *every,
            *([f"init_from={ckpt}"] if ckpt else []), *extra)  # fmt: skip
    summary = json.loads((run / "summary.json").read_text())
    return {"summary": summary, "robot_s": cell.robot_s, "wall_s": time.perf_counter() - t}


def zero_shot(ckpt: Path, seed: int, episodes: int) -> dict:
    """`deploy` of the sim checkpoint on the cell, on the episodes seed `seed`'s training runs evaluate."""
    t = time.perf_counter()
    with Cell() as cell:
        out = cli("deploy", str(ckpt), "--robot", "sim", "--domain", str(cell.domain), "--episodes", str(episodes),
                  "--seed", str(1_000_000 + 1000 * seed), "--quiet")  # fmt: skip
    return {"deploy": json.loads(out), "robot_s": cell.robot_s, "wall_s": time.perf_counter() - t}


def kept(path: Path, params: dict, what: str, stage: Callable[[], dict]) -> dict:
    """`stage`'s result, kept at `path` with `params`: a rerun of the bench with the same parameters takes it from
    there instead of running it again."""
    if reusable(path, params, what):
        return json.loads(path.read_text())
    result = stage()
    path.write_text(json.dumps(result))
    record(path, params)
    return result


def reached(evals: list[dict]) -> float | None:
    """Training robot-minutes at the first evaluation at or above the goal after training began (None: never).
    Step 0's is the policy the run started from: (c)'s is the sim policy, whose score is (b)'s, not fine-tuning's."""
    return next((e["env_steps"] / HZ / 60.0 for e in evals if e["env_steps"] > 0 and e["success_rate"] >= GOAL), None)


def curve_row(name: str, seed: int, r: dict) -> dict:
    s = r["summary"]
    evals = s["evals"]
    curve = [(e["env_steps"] / HZ / 60.0, e["success_rate"], e.get("intervention_rate")) for e in evals]
    return {"bench": f"{name} s{seed}", "arm": name, "seed": seed, "start_success": evals[0]["success_rate"],
            "final_success": s.get("final_success_rate"), "env_steps": s["env_steps"],
            "robot_min_training": s["env_steps"] / HZ / 60.0, "robot_min_eval": s.get("robot_minutes_eval"),
            "reached_goal_at_robot_min": reached(evals), "intervention_rate": s.get("intervention_rate"),
            "updates": s.get("updates"), "wall_min": r["wall_s"] / 60.0, "curve": curve}  # fmt: skip


def verdict(rows: list[dict]) -> dict:
    """The issue's goals from the rows: (b) mean >= 0.6; (c) reaches 0.9 within 10 robot-min and a third of (a)'s
    time on the same seed (where (a) never got there, its budget: a lower bound on its time)."""
    by = {arm: [r for r in rows if r["arm"] == arm] for arm in ("scratch", "zero-shot", "fine-tuned")}
    zs = [r["success"] for r in by["zero-shot"]]
    a_t = [r["reached_goal_at_robot_min"] for r in by["scratch"]]
    c_t = [r["reached_goal_at_robot_min"] for r in by["fine-tuned"]]
    a_time = [t if t is not None else r["robot_min_training"] for t, r in zip(a_t, by["scratch"], strict=True)]
    met = [c is not None and c <= GOAL_MINUTES and c <= a / 3 for c, a in zip(c_t, a_time, strict=False)]
    return {"bench": "goals", "zero_shot_mean": sum(zs) / max(len(zs), 1),
            "zero_shot_goal_met": bool(zs) and sum(zs) / len(zs) >= ZERO_SHOT_GOAL,
            "scratch_reached": a_t, "finetuned_reached": c_t, "scratch_time_robot_min": a_time,
            "scratch_all_reached": all(t is not None for t in a_t),
            "finetune_goal_met": bool(c_t) and len(c_t) == len(a_time) and all(met)}  # fmt: skip


def plot(rows: list[dict], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4))
    colours = {
        "scratch": "tab:blue",
        "fine-tuned": "tab:green",
        "sim demos": "tab:olive",
        "from step 0": "tab:purple",
        "critic warm-up": "tab:brown",
    }
    for r in rows:
        if "curve" not in r:
            continue
        x, y, iv = zip(*r["curve"], strict=True)
        c = colours.get(r["arm"], "grey")
        ax.plot(x, y, "o-", color=c, alpha=0.8, label=r["bench"])
        bx.plot(x, [float("nan") if v is None else v for v in iv], "s--", color=c, alpha=0.8, label=r["bench"])
    for r in rows:
        if r.get("arm") == "zero-shot":
            ax.axhline(r["success"], color="tab:red", lw=0.8, ls="--", label=r["bench"])
    ax.axhline(GOAL, color="grey", lw=0.8, ls=":")
    titles = ("eval success (the sim robot's check)", "intervention rate (training steps since the last evaluation)")
    for a, title in zip((ax, bx), titles, strict=True):
        a.set_xlabel("training robot time (min) = env steps / 10 Hz")
        a.set_ylim(-0.02, 1.02)
        a.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="best")
    fig.suptitle(f"PickCube on the stand-in cell ({CELL}), real time, cameras + proprio, classifier reward")
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)


def to_markdown(rows: list[dict]) -> str:
    out = ["| arm | seed | start | final | reached 0.9 at (robot min) | training robot min | eval robot min | "
           "intervention rate | wall min |", "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip

    def f(v: object) -> str:
        return "-" if v is None else f"{v:.2f}" if isinstance(v, float) else str(v)

    for r in rows:
        if r["arm"] == "zero-shot":
            out.append(f"| zero-shot (deploy) | {r['seed']} | | {f(r['success'])} ({r['episodes']} episodes) | | 0 | "
                       f"{f(r['robot_min'])} | | {f(r['wall_min'])} |")  # fmt: skip
        elif "curve" in r:
            out.append(f"| {r['arm']} | {r['seed']} | {f(r['start_success'])} | {f(r['final_success'])} | "
                       f"{f(r['reached_goal_at_robot_min'])} | {f(r['robot_min_training'])} | "
                       f"{f(r['robot_min_eval'])} | {f(r['intervention_rate'])} | {f(r['wall_min'])} |")  # fmt: skip
    return "\n".join(out)


def main(quick: bool = False, checkpoint: Path | None = None, seeds: int = 2, scratch_steps: int = 0,
         finetune_steps: int = 0, deploy_episodes: int = 0, choices: bool = False, sim_minutes: float = 15.0,
         out: Path | None = None) -> list[dict]:  # fmt: skip
    work = (out or HERE / "results") / ("sim_to_robot_quick" if quick else "sim_to_robot")
    if quick:
        shutil.rmtree(work, ignore_errors=True)
        seeds = 1
    work.mkdir(parents=True, exist_ok=True)
    scratch_steps = scratch_steps or (20 if quick else 3600)
    finetune_steps = finetune_steps or (20 if quick else 1200)
    deploy_episodes = deploy_episodes or (1 if quick else 20)
    warmup = f"loop.learning_starts={10 if quick else WARMUP}"
    if checkpoint:
        ckpt, sim = checkpoint, {"checkpoint": str(checkpoint)}
    else:
        ckpt, sim = train_sim(work / "sim_run", quick, sim_minutes)
    store, clf = work / "demos.zarr", work / "classifier.safetensors"
    stages: dict[str, dict] = {}
    n_demos, hold, wander = (4, 3, 2) if quick else (12, 8, 8)
    clf_steps = 10 if quick else 1000
    learned = {"cell": CELL, "demos": n_demos, "label_frames": hold, "wander": wander, "classifier_steps": clf_steps}
    if not (reusable(clf, learned, "the demos and classifier") and (work / "classifier.json").exists()):
        shutil.rmtree(store, ignore_errors=True)  # `collect --resume` below adds only to this stage's own store
        t = time.perf_counter()
        robot_s, restarts = 0.0, []
        # `collect` still ends on an aborted episode (a stale stream, a watchdog hold: #28 item 4): go on from there
        for attempt in range(8):
            with Cell() as cell:
                try:
                    cli("collect", str(store), "--robot", "sim", "--domain", str(cell.domain),
                        "-n", str(n_demos), "--teleop", "simulated", "--label-frames", str(hold), "--obs", "pixels",
                        "--wander", str(wander), "--no-fsync", *(["--resume"] if store.exists() else []))  # fmt: skip
                    failed = ""
                except RuntimeError as e:
                    if not re.search(r"(StaleDataError|RobotHold|SafetyStop):", str(e)) or attempt == 7:
                        raise
                    failed = str(e).strip().splitlines()[-1]
            robot_s += cell.robot_s
            if not failed:
                break
            restarts.append(failed)
        stages["demos"] = {"robot_min": robot_s / 60.0, "wall_min": (time.perf_counter() - t) / 60.0,
                           "restarts_on_aborts": restarts}  # fmt: skip
        t = time.perf_counter()
        report = json.loads(cli("classifier", "train", str(store), "--out", str(clf), "--steps", str(clf_steps)))
        (work / "classifier.json").write_text(json.dumps(report, indent=1))
        record(clf, learned)
        stages["classifier"] = {"wall_min": (time.perf_counter() - t) / 60.0}
    threshold = max(json.loads((work / "classifier.json").read_text())["threshold"], THRESHOLD_FLOOR)
    upstream = {"sim": sim, "classifier": learned}
    rows: list[dict] = []
    for seed in range(seeds):
        z = kept(work / f"zero_shot_s{seed}.json", {"seed": seed, "episodes": deploy_episodes, "sim": sim},
                 f"zero-shot s{seed}", lambda s=seed: zero_shot(ckpt, s, deploy_episodes))  # fmt: skip
        d = z["deploy"]
        rows.append({"bench": f"zero-shot s{seed}", "arm": "zero-shot", "seed": seed, "success": d["success_rate"],
                     "episodes": d["episodes"], "aborted": d.get("aborted_episodes"),
                     "robot_min": z["robot_s"] / 60.0, "wall_min": z["wall_s"] / 60.0})  # fmt: skip
        rows.append(curve_row("scratch", seed, robot_run(work / f"scratch_s{seed}", None, seed, scratch_steps,
                                                         store, clf, threshold, quick,
                                                         upstream={"classifier": learned})))  # fmt: skip
        rows.append(curve_row("fine-tuned", seed, robot_run(work / f"finetune_s{seed}", ckpt, seed, finetune_steps,
                                                            store, clf, threshold, quick, warmup,
                                                            upstream=upstream)))  # fmt: skip
        _save(work, rows, stages, ckpt)  # a partial result survives a later stage's failure
    if choices:
        sim_demos = Path(ckpt).parent.parent / "demos.zarr" if (Path(ckpt) / "model.safetensors").exists() else (
            Path(ckpt) / "demos.zarr")  # fmt: skip
        for name, demos, extra in (
            ("sim demos", sim_demos, [warmup]),
            ("from step 0", store, []),
            ("critic warm-up", store, [warmup, f"loop.critic_warmup={CRITIC_WARMUP}"]),
        ):
            folder = work / f"choice_{name.replace(' ', '_')}"
            rows.append(curve_row(name, 0, robot_run(folder, ckpt, 0, finetune_steps, demos, clf, threshold, quick,
                                                     *extra, upstream=upstream)))  # fmt: skip
    rows.append(verdict(rows))
    _save(work, rows, stages, ckpt)
    if any("curve" in r for r in rows):
        plot(rows, work / "curve.png")
    return rows


def _save(work: Path, rows: list[dict], stages: dict, ckpt: Path) -> None:
    clf = json.loads((work / "classifier.json").read_text()) if (work / "classifier.json").exists() else {}
    picked = clf.get("threshold", 0.0)
    doc = {"cell": CELL, "checkpoint": str(ckpt), "stages": stages, "rows": rows, "classifier_test": clf.get("test"),
           "classifier_threshold": picked, "threshold_used": max(picked, THRESHOLD_FLOOR)}  # fmt: skip
    (work / "sim_to_robot.json").write_text(json.dumps(doc, indent=1))
    (work / "sim_to_robot.md").write_text(to_markdown([r for r in rows if "arm" in r]) + "\n")


if __name__ == "__main__":
    import argparse

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny budgets, one seed: a smoke run, not numbers")
    p.add_argument("--checkpoint", type=Path, default=None, help="the sim camera run (default: train one here)")
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--scratch-steps", type=int, default=0, help="(a)'s env-step budget (default 3600)")
    p.add_argument("--finetune-steps", type=int, default=0, help="(c)'s env-step budget (default 1200)")
    p.add_argument("--deploy-episodes", type=int, default=0, help="(b)'s episodes per seed (default 20)")
    p.add_argument(
        "--choices", action="store_true", help="also (c) with the sim demos, from step 0, with a critic warm-up"
    )
    p.add_argument("--sim-minutes", type=float, default=15.0, help="wall clock of the sim run trained here")
    a = p.parse_args()
    result = main(a.quick, a.checkpoint, a.seeds, a.scratch_steps, a.finetune_steps, a.deploy_episodes, a.choices,
                  a.sim_minutes)  # fmt: skip
    print(to_markdown([r for r in result if "arm" in r]))
    print(json.dumps(result[-1]))
