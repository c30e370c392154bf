"""HIL-SERL on the robot, end to end over ROS 2 (issue #14): `robot-rl sim-robot --lockstep` in its own process,
and everything else through `RobotEnv` as on an arm, from cameras + proprio (no object pose):

1. demos: the simulated operator drives PickCube through the teleop device interface and presses its success key
   when the task looks done (`collect --backend robot --device simulated --label-frames N`);
2. classifier: trained on those labelled frames (`robot-rl classifier train`), precision / recall / false-positive
   rate on held-out episodes, threshold picked on validation episodes for a low false-positive rate;
3. training: `robot-rl train robot=sim` with the simulated operator intervening through the device interface and
   the reward from the classifier only (its keys, pressed from the sim's success topic, count only with
   `intervention.success_from_sim=true`, off by default); success is judged by the sim
   robot's success topic at evaluation only. Baseline in the same run: the untrained policy, evaluated at env step 0
   on the final evaluation's episodes (`loop.eval_at_start`, as tests/real/test_robot_loop.py does).

Robot time is env steps / control rate (10 Hz); the sim robot's own count of simulated seconds (all commands:
demos, probes, evaluations, training) is reported beside it. Every stage is resumable (its outputs stay in
`bench/results/robot_loop/`; a rerun continues, the training from its last checkpoint, under `--minutes` of wall
clock per call), so a long run can be done in pieces on a loaded box. Run alone:
`.venv/bin/python bench/bench_robot_loop.py [--quick] [--minutes 40]`.
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
from pathlib import Path

os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
HERE = Path(__file__).resolve().parent
HZ = 10.0
GOAL, GOAL_MINUTES = 0.8, 60.0


def cli(*args: str, timeout: float | None = None) -> str:
    """A `robot-rl` command as its own process; its stdout, or the tail of its stderr on failure."""
    p = subprocess.run([sys.executable, "-m", "robot_rl.cli", *args], capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"robot-rl {args[0]} failed ({p.returncode}): {p.stderr[-3000:]}")
    return p.stdout


class SimRobot:
    """`robot-rl sim-robot --lockstep` with both cameras on `domain`; on exit, the simulated seconds."""

    def __init__(self, domain: int) -> None:
        self.domain = domain
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "robot_rl.cli", "sim-robot", "--lockstep", "--cameras", "front,wrist",
             "--domain", str(self.domain)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    def stop(self) -> float:
        self.proc.terminate()
        _, err = self.proc.communicate(timeout=60)
        found = re.search(r"stopped after \d+ ticks, ([\d.]+) s simulated", err)
        return float(found.group(1)) if found else 0.0


def run_stages(work: Path, quick: bool, minutes: float) -> dict:
    state_path = work / "state.json"
    # The domain stays with the work dir: a resumed run keeps its robot config (only loop.* may change).
    fresh = {"robot_s": {}, "wall_s": {}, "domain": random.randint(100, 200)}
    state = json.loads(state_path.read_text()) if state_path.exists() else fresh
    n_demos, hold, wander = (5, 5, 6) if quick else (20, 10, 8)
    clf_steps = 100 if quick else 1000
    short = ["loop.env_steps=60", "loop.eval_every=30", "loop.eval_episodes=1", "loop.final_eval_episodes=2"]
    budget = short if quick else [
        f"loop.env_steps={int(GOAL_MINUTES * 60 * HZ)}", "loop.eval_every=250", "loop.eval_episodes=10",
        "loop.final_eval_episodes=20", f"loop.stop_at_success={GOAL}", "loop.checkpoint_every=250",
    ]  # fmt: skip
    store, clf, run = work / "demos.zarr", work / "classifier.safetensors", work / "run"

    def stage(name: str, fn) -> None:
        sim, t = SimRobot(state["domain"]), time.perf_counter()
        try:
            fn(sim.domain)
        finally:
            state["robot_s"][name] = state["robot_s"].get(name, 0.0) + sim.stop()
            state["wall_s"][name] = state["wall_s"].get(name, 0.0) + time.perf_counter() - t
            state_path.write_text(json.dumps(state, indent=1))

    def robot_args(domain: int) -> list[str]:
        # The workspace a lab would measure around the task: beyond x = 0.62 m the Panda's elbow nears its joint
        # limit, which latches a safety fault (and ends this process: aborted episodes come with issue #14 part B).
        return [
            "robot=sim",
            "robot.lockstep=true",
            f"robot.domain_id={domain}",
            "obs=pixels",
            "threads=1",
            # A pixel checkpoint holds both replay buffers whole (100k frames: 4.7 GB); online keeps the newest 4000.
            "loop.buffer_capacity=4000",
            "robot.safety.workspace_lo=[0.38,-0.2,0.01]",
            "robot.safety.workspace_hi=[0.62,0.2,0.25]",
        ]

    def collect(domain: int) -> None:
        cli("collect", str(store), "--backend", "robot", "--robot", "sim", "--domain", str(domain), "--robot-set",
            "lockstep=true", "-n", str(n_demos), "--device", "simulated", "--label-frames", str(hold), "--obs",
            "pixels", "--wander", str(wander), "--no-fsync", *(["--resume"] if store.exists() else []))  # fmt: skip

    deadline = time.monotonic() + 60.0 * minutes

    def train(domain: int, run_dir: Path, *extra: str) -> None:
        # loop.max_minutes counts the run's earlier sessions (as far as its last checkpoint): add what is left here
        left = (deadline - time.monotonic()) / 60.0
        budget = f"loop.max_minutes={spent_minutes(run_dir) + left:.2f}"
        if (run_dir / "config.yaml").exists():  # continue from its last checkpoint, with its own config
            cli("train", f"resume={run_dir}", budget, *extra)
            return
        cli("train", *robot_args(domain), f"run_dir={run_dir}", f"demos.path={store}", "reward.source=classifier",
            f"reward.classifier_path={clf}", "intervention.device=simulated",
            "intervention.trigger=no_progress", "intervention.patience=5", "loop.eval_at_start=true", budget,
            *extra)  # fmt: skip

    if not (store / "commit.json").exists() or stored_episodes(store) < n_demos:
        stage("demos", collect)
    if not clf.exists():
        t = time.perf_counter()
        report = json.loads(cli("classifier", "train", str(store), str(clf), "--steps", str(clf_steps)))
        (work / "classifier.json").write_text(json.dumps(report, indent=1))
        state["wall_s"]["classifier"] = time.perf_counter() - t
        state_path.write_text(json.dumps(state, indent=1))
    faults = state.setdefault("faults", [])
    while unfinished(run / "summary.json", int(GOAL_MINUTES * 60 * HZ) if not quick else 60):
        if deadline - time.monotonic() < 120.0:
            break
        try:
            stage("run", lambda d: train(d, run, *budget))
        except RuntimeError as e:  # a latched safety fault ends the process: resume from the last checkpoint
            if "SafetyStop" not in str(e) or len(faults) >= 10:
                raise
            faults.append(str(e).strip().splitlines()[-1])
            state_path.write_text(json.dumps(state, indent=1))
    return state


def spent_minutes(run_dir: Path) -> float:
    """Wall clock the run had spent at its last checkpoint (what `loop.max_minutes` counts on a resume)."""
    latest = run_dir / "checkpoints" / "latest"
    if not latest.exists():
        return 0.0
    return json.loads((run_dir / "checkpoints" / latest.read_text() / "counters.json").read_text())["wall_clock_s"] / 60


def unfinished(summary: Path, env_steps: int) -> bool:
    """No summary yet, or one that stopped on its wall-clock budget short of the goal and of its env steps."""
    if not summary.exists():
        return True
    s = json.loads(summary.read_text())
    return s["env_steps"] < env_steps and max([e["success_rate"] for e in s["evals"]] + [0.0]) < GOAL


def stored_episodes(store: Path) -> int:
    from robot_rl.demos.store import EpisodeStore

    with EpisodeStore(store, "r") as st:
        return len(st)


def plot(evals: list[dict], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = [e["env_steps"] / HZ / 60.0 for e in evals]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(x, [e["success_rate"] for e in evals], "o-", label="eval success (sim robot's success topic)")
    ax.plot(x, [e.get("intervention_rate", float("nan")) for e in evals], "s--", label="intervention rate")
    ax.axhline(GOAL, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("robot time (min) = env steps / 10 Hz")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("PickCube on the lockstep sim robot: cameras + proprio, classifier reward")
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)


def main(quick: bool = False, minutes: float = 40.0) -> list[dict]:
    work = HERE / "results" / ("robot_loop_quick" if quick else "robot_loop")
    if quick:
        shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    state = run_stages(work, quick, minutes)
    clf = json.loads((work / "classifier.json").read_text())
    summary_path = work / "run" / "summary.json"
    done = summary_path.exists()
    if done:
        summary = json.loads(summary_path.read_text())
        evals = summary["evals"]
    else:  # the wall-clock budget of this call ran out mid-run: what it logged so far (`resume` continues it)
        lines = (
            (work / "run" / "evals.jsonl").read_text().splitlines() if (work / "run" / "evals.jsonl").exists() else []
        )
        evals, summary = [json.loads(x) for x in lines if x], {}
    base = evals[0] if evals and evals[0]["env_steps"] == 0 else None  # the untrained policy (loop.eval_at_start)
    curve, evals = evals, [e for e in evals if e is not base]
    reached = next((e["env_steps"] / HZ / 60.0 for e in evals if e["success_rate"] >= GOAL), None)
    plot(curve, work / "curve.png") if evals else None
    t = clf["test"]
    rows = [
        {"bench": "robot loop: demos by the simulated operator (labelled frames)",
         "robot_min": state["robot_s"].get("demos", 0.0) / 60.0, "wall_s": state["wall_s"].get("demos", 0.0)},
        {"bench": f"robot loop: classifier on {len(clf['episodes']['test'])} held-out episodes",
         "precision": t["precision"], "recall": t["recall"], "false_positive_rate": t["false_positive_rate"],
         "threshold": clf["threshold"], "recall_at_0.5": clf["test_at_0.5"]["recall"],
         "fpr_at_0.5": clf["test_at_0.5"]["false_positive_rate"]},
        {"bench": "robot loop: baseline, untrained policy (same run, env step 0)",
         "success": base["success_rate"] if base else None, "episodes": base["episodes"] if base else 0},
        *({"bench": f"robot loop: eval at {e['env_steps'] / HZ / 60.0:.1f} robot min ({e['env_steps']} steps)",
           "success": e["success_rate"], "intervention_rate": e.get("intervention_rate")} for e in evals),
        {"bench": "robot loop: " + ("finished" if done else "budget spent, resumable"),
         "final_success": summary.get("final_success_rate"), "env_steps": evals[-1]["env_steps"] if evals else 0,
         "robot_min_training": (evals[-1]["env_steps"] if evals else 0) / HZ / 60.0,
         "robot_min_eval": evals[-1].get("robot_minutes_eval") if evals else None,
         "robot_min_all": sum(state["robot_s"].values()) / 60.0, "wall_min": sum(state["wall_s"].values()) / 60.0,
         f"goal_{GOAL}_within_{GOAL_MINUTES:.0f}_robot_min": reached is not None and reached <= GOAL_MINUTES,
         "reached_at_robot_min": reached, "intervention_rate": summary.get("intervention_rate"),
         "safety_faults_resumed": len(state.get("faults", []))},
    ]  # fmt: skip
    (work / "robot_loop.json").write_text(json.dumps({"rows": rows, "classifier": clf, "evals": evals}, indent=1))
    return rows


if __name__ == "__main__":
    import argparse

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--minutes", type=float, default=40.0, help="wall-clock budget of the training stage, this call")
    ns = p.parse_args()
    for row in main(ns.quick, ns.minutes):
        print(row)
