"""Fleet (issue #56), part (b) robot time: 1, 2 and 4 sim robots on one learner, PickCube from both cameras with the
classifier reward and the person-like operator, as the robot-loop bench runs one robot (`bench_robot_loop.py`).

A fleet is `robot-rl launch robot=sim` with one cell per robot: launch serves each cell's lockstep sim robot on its
own ROS domain (`distributed.standins`), one actor per cell, one learner on the Zenoh plane. The operator's demos
(20, on one robot) and the classifier are made once and shared by every fleet; as in the one-robot loop, the
operator judges each frame the classifier pays for on any arm, and the learner refits it every 25 verdicts and
sends it to every arm with the policy (`reward.refit_every`). The learner checkpoints every 250 env
steps of the whole fleet; the bench evaluates each checkpoint as it appears, as `robot-rl deploy` does on an arm (a
lockstep sim robot of its own, 10 episodes on fixed seeds, judged by its success topic), and the first at or above
0.9 again on 40 fresh episodes; a confirmed one ends the fleet's run (SIGINT to the learner: it saves and counts
each actor's transitions and losses).

Robot time is counted whole and shared: the fleet's arm minutes are the demos' (the sim robot's simulated seconds),
every evaluation up to the confirmation (the same), and training (each command one control period, as
`real.timing.ArmClock` counts it; the lockstep cell's scene reset takes none), up to the checkpoint confirmed;
per robot is that over N (a fleet evaluates and collects on all its arms; its cells' shares of the training steps
are in the table). The speed-up is one robot's minutes over N robots', each seed against its own one-robot run.
Lockstep: robot time is simulated time, so the 2-core box's speed does not enter it; the stand-ins' own simulated
seconds (to the end of each run) are reported beside it.

`--realtime`: the cells and the evaluations in real time, the pair (1 and 2 robots) that shows whether lockstep's
numbers hold when the arms do not wait for the learner: 4000 fleet steps, evaluated once trained (an evaluation
beside real-time cells would take their cores), in `fleet_robots_realtime/`.

Resumable: each fleet's run and evaluations stay in `bench/results/fleet_robots/n<N>_s<seed>/`; a rerun continues
an unfinished one (`launch resume=`) under `--minutes` of wall clock per call. Run alone:
`.venv/bin/python bench/bench_fleet_robots.py [--quick] [--robots 1,2,4] [--seeds 0,1] [--minutes 240]
[--realtime]`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from bench_robot_loop import HZ, TASKS, Cell, SimRobot, Stages, demos_and_classifier
from common import cli

os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
HERE = Path(__file__).resolve().parent
GOAL = 0.9
EVAL_DOMAIN, FIRST_CELL = 209, 210  # apart from the robot-loop bench's 100..200


@dataclass(frozen=True)
class Budget:
    steps: int  # the fleet's env steps at most (one robot confirmed 0.8 at 2500 in the robot-loop bench)
    every: int  # fleet env steps between checkpoints, each evaluated
    episodes: int
    confirm: int


FULL, QUICK = Budget(6000, 250, 10, 40), Budget(120, 60, 1, 2)
REALTIME = Budget(4000, 250, 10, 40)  # one robot confirmed at 2750 in lockstep (seed 0)
# A fleet's learner is a GPU box: its profile's ensemble (configs/profile/gpu.yaml, RLPD's 10 critics, min over a
# random pair) at the CPU profile's UTD, so the replay ratio stays 2. Lockstep keeps the 2-core box's slower
# updates (2.3x a 2-critic update here) out of robot time.
LEARNER = ("sac.n_critics=10",)


def main(quick: bool = False, robots: str = "1,2,4", seeds: str = "0,1", minutes: float = 240.0,
         realtime: bool = False) -> list[dict]:  # fmt: skip
    """`realtime`: the cells' and the evaluations' sim robots in real time (the pair that checks lockstep's
    numbers), in a work folder of its own."""
    work = HERE / "results" / ("fleet_robots" + ("_realtime" if realtime else "") + ("_quick" if quick else ""))
    if quick:
        shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    task, budget = TASKS["pick_cube"], QUICK if quick else REALTIME if realtime else FULL
    stages = Stages(work, task.name, Cell(realtime=realtime))  # the demos on the fleet's kind of robot
    store, clf, _ = demos_and_classifier(stages, task, quick)
    demos_s = stages.state["robot_s"].get("demos", 0.0)
    deadline = time.monotonic() + 60.0 * minutes
    fleets = [(int(s), int(n)) for s in seeds.split(",") for n in robots.split(",")]
    for seed, n in fleets:
        if time.monotonic() < deadline:
            shared = [f"demos.path={store}", f"reward.classifier_path={clf}", f"robot.lockstep={not realtime}"]
            run_fleet(work / f"n{n}_s{seed}", n, seed, budget, shared, deadline, realtime)
    rows = [fleet_row(work / f"n{n}_s{seed}", n, seed, demos_s) for seed, n in fleets]
    for r in rows:  # each seed against its own one-robot fleet
        one = next((o for o in rows if o["seed"] == r["seed"] and o["robots"] == 1), None)
        mins = r["robot_min_per_robot_to_confirmed"]
        base = one and one["robot_min_per_robot_to_confirmed"]
        r["speedup_vs_one_robot"] = base / mins if base and mins else None
    return rows + fleet_means(rows)


def fleet_means(rows: list[dict], draws: int = 10_000) -> list[dict]:
    """Per fleet size above one, over the seeds where every size confirmed: the mean robot-min per robot against
    one robot's mean, and a 90 % bootstrap interval of that ratio (seeds drawn with replacement, each with all its
    fleets). One run per seed divides two noisy crossings; this is the speed-up a lab can expect."""
    sizes = sorted({r["robots"] for r in rows})
    mins = {(r["seed"], r["robots"]): r["robot_min_per_robot_to_confirmed"] for r in rows}
    seeds = sorted(s for s in {r["seed"] for r in rows} if all(mins.get((s, n)) for n in sizes))
    if 1 not in sizes or len(seeds) < 2:
        return []
    table = np.array([[mins[s, n] for n in sizes] for s in seeds])  # seeds x sizes
    means = table.mean(axis=0)
    draws_idx = np.random.default_rng(0).integers(0, len(seeds), (draws, len(seeds)))
    boot = table[draws_idx].mean(axis=1)  # draws x sizes
    return [{
        "bench": f"fleet robot time: {n} sim robots, mean of seeds {','.join(map(str, seeds))}", "robots": n,
        "seeds": seeds, "robot_min_per_robot_mean": float(means[i]), "one_robot_mean": float(means[0]),
        "speedup_of_means": float(means[0] / means[i]),
        "speedup_of_means_90ci": [float(x) for x in np.percentile(boot[:, 0] / boot[:, i], [5, 95])],
    } for i, n in enumerate(sizes) if n > 1]  # fmt: skip


def launch_args(n: int, seed: int, budget: Budget, shared: list[str], run: Path) -> list[str]:
    """`robot-rl launch` of an N-cell fleet in the robot-loop bench's settings (cell limits, buffer, operator,
    classifier refits)."""
    refit = TASKS["pick_cube"].refit
    cells = ",".join(str(FIRST_CELL + 2 * i) for i in range(n))  # ports apart: Fast DDS's per-domain ranges
    return [
        "launch", "robot=sim", "task=pick_cube", "obs=pixels", "threads=1", f"seed={seed}", *LEARNER,
        f"distributed.cell_domains=[{cells}]", "distributed.standins=true", "loop.buffer_capacity=4000",
        *TASKS["pick_cube"].robot, *shared, "reward.source=classifier", f"reward.refit_every={refit[0]}",
        f"reward.refit_steps={refit[1]}", "intervention.device=simulated",
        "intervention.operator=person", "intervention.trigger=no_progress", "intervention.patience=5",
        f"loop.env_steps={budget.steps}", "loop.eval_every=0", f"loop.checkpoint_every={budget.every}",
        f"run_dir={run}",
    ]  # fmt: skip


def run_fleet(folder: Path, n: int, seed: int, budget: Budget, shared: list[str], deadline: float,
              realtime: bool) -> None:  # fmt: skip
    """Trains the fleet and evaluates its checkpoints as they appear (in real time: once it has trained) until one
    is confirmed, its budget is spent or the call's wall clock is; an unfinished run resumes."""
    run, evals = folder / "run", Evals(folder / "evals.jsonl", seed)
    summary = json.loads((run / "summary.json").read_text()) if (run / "summary.json").exists() else {}
    finished = summary.get("status") == "finished"  # its budget spent: only checkpoints left to evaluate
    if evals.confirmed() or finished and not evals.todo(run):
        return
    folder.mkdir(parents=True, exist_ok=True)
    args = ["launch", f"resume={run}"] if (run / "config.yaml").exists() else launch_args(n, seed, budget, shared, run)
    with (folder / "launch.log").open("a") as log:
        launch = None if finished else subprocess.Popen([sys.executable, "-m", "robot_rl.cli", *args], stdout=log,
                                                        stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        try:
            while not evals.confirmed() and time.monotonic() < deadline:
                ended = launch is None or launch.poll() is not None
                # In real time the cells do not wait: an evaluation beside them would take their cores.
                for step in evals.todo(run) if ended or not realtime else []:
                    ckpt = run / "checkpoints" / f"step_{step:08d}"
                    evals.evaluate(ckpt, step, budget, folder / "eval-robot.log", realtime)
                    if evals.confirmed():
                        break
                if ended:
                    break
                time.sleep(2.0)
        finally:
            if launch is not None:
                stop_fleet(launch)


def stop_fleet(launch: subprocess.Popen) -> None:
    """The learner by SIGINT (it saves and writes its summary with each actor's counts), launch stops the rest."""
    if launch.poll() is None:
        found = subprocess.run(["pgrep", "-P", str(launch.pid), "-f", "robot_rl.cli learner"], capture_output=True,
                               text=True).stdout.split()  # fmt: skip
        for pid in found:
            os.kill(int(pid), signal.SIGINT)
        try:
            launch.wait(timeout=180)
        except subprocess.TimeoutExpired:
            os.killpg(launch.pid, signal.SIGKILL)
            launch.wait()


class Evals:
    """A fleet's evaluations in `evals.jsonl`: env steps, success, episodes, aborted, the evaluation's robot seconds,
    and whether it was a confirmation on fresh seeds."""

    def __init__(self, path: Path, seed: int) -> None:
        self.path, self.seed = path, 1_000_000 + 1000 * seed  # the periodic evaluations' seeds, as a run's
        lines = path.read_text().splitlines() if path.exists() else []
        self.entries = [json.loads(x) for x in lines if x]

    def confirmed(self) -> dict | None:
        return next((e for e in self.entries if e["confirm"] and e["success_rate"] >= GOAL), None)

    def todo(self, run: Path) -> list[int]:
        """Checkpoints saved (up to `latest`) and not yet evaluated, oldest first."""
        latest = run / "checkpoints" / "latest"
        if not latest.exists():
            return []
        name = latest.read_text()
        last = float("inf") if name == "final" else int(name.removeprefix("step_"))
        done = {e["env_steps"] for e in self.entries if not e["confirm"]}
        saved = (int(p.name.removeprefix("step_")) for p in (run / "checkpoints").glob("step_*"))
        return sorted(s for s in saved if s <= last and s not in done)

    def evaluate(self, ckpt: Path, step: int, budget: Budget, log: Path, realtime: bool) -> None:
        e = deploy(ckpt, budget.episodes, self.seed, log, realtime)
        self.add({"env_steps": step, "confirm": False, **e})
        scored = e["episodes"] - e["aborted_episodes"]
        if e["success_rate"] >= GOAL and scored >= e["aborted_episodes"]:
            k = sum(1 for x in self.entries if x["confirm"])
            fresh = deploy(ckpt, budget.confirm, self.seed + 5_000_000 + 100_000 * k, log, realtime)
            self.add({"env_steps": step, "confirm": True, **fresh})

    def add(self, entry: dict) -> None:
        self.entries.append(entry)
        with self.path.open("a") as f:
            f.write(json.dumps(entry) + "\n")


def deploy(ckpt: Path, episodes: int, first_seed: int, log: Path, realtime: bool) -> dict:
    """`robot-rl deploy` of `ckpt` on a sim robot of its own, in the training cells' limits: success (by the sim
    robot's success topic), episodes, aborted, and the robot seconds the evaluation took."""
    sim = SimRobot(EVAL_DOMAIN, "pick_cube", "sim", realtime, log)
    cell = (f"lockstep={not realtime}", *(kv.removeprefix("robot.") for kv in TASKS["pick_cube"].robot))
    sets = [a for kv in cell for a in ("--robot-set", kv)]
    try:
        out = cli("deploy", str(ckpt), "--robot", "sim", "--domain", str(EVAL_DOMAIN), *sets, "--episodes",
                  str(episodes), "--seed", str(first_seed), "--quiet")  # fmt: skip
    finally:
        robot_s = sim.stop()
    r = json.loads(out)
    return {"success_rate": r["success_rate"], "episodes": r["episodes"], "aborted_episodes": r["aborted_episodes"],
            "robot_s": robot_s}  # fmt: skip


def fleet_row(folder: Path, n: int, seed: int, demos_s: float) -> dict:
    """One fleet: its first crossing and confirmed point in robot minutes per robot, what it cost in all, and
    whether any transition was lost."""
    history = Evals(folder / "evals.jsonl", seed)
    evals = history.entries
    summary_path = folder / "run" / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    actors = summary.get("actors", {})

    def per_robot(e: dict | None) -> float | None:
        """The fleet's arm minutes by the evaluation `e` (itself included) over N."""
        if e is None:
            return None
        upto = evals[: evals.index(e) + 1]
        arm_s = demos_s + sum(x["robot_s"] for x in upto) + e["env_steps"] / HZ
        return arm_s / 60.0 / n

    crossing = next((e for e in evals if not e["confirm"] and e["success_rate"] >= GOAL), None)
    confirmed = history.confirmed()
    sent = [a["transitions"] for a in actors.values()]
    shares = [a / max(1, sum(sent)) for a in sent]
    log = (folder / "launch.log").read_text() if (folder / "launch.log").exists() else ""
    standins_s = sum(simulated_s(x) for x in log.splitlines())
    return {
        "bench": f"fleet robot time: {n} sim robot{'s' if n > 1 else ''}, seed {seed}",
        "robots": n, "seed": seed,
        "first_crossing_env_steps": crossing and crossing["env_steps"],
        "first_crossing_robot_min_per_robot": per_robot(crossing),
        "confirmed_env_steps": confirmed and confirmed["env_steps"],
        "confirmed_success": confirmed and confirmed["success_rate"],
        "confirmed_episodes": confirmed and confirmed["episodes"],
        "robot_min_per_robot_to_confirmed": per_robot(confirmed),
        "evaluations": sum(1 for e in evals if not e["confirm"]),
        "evaluation_robot_min": sum(e["robot_s"] for e in evals) / 60.0,
        "trained_env_steps": summary.get("env_steps"),
        "replay_ratio": summary.get("replay_ratio"),  # sac.utd where the learner kept up (real time may not)
        # The fleet's resets and waits between episodes, as its actors' arms reported them (the learner's summary).
        # The per-robot minutes above count demos, evaluations and training steps only: this is not in them.
        "resets_robot_min": summary.get("robot_minutes_resets"),
        "cell_shares_of_steps": sorted(round(s, 3) for s in shares),
        "transitions_lost": sum(a["lost"] for a in actors.values()) if actors else None,
        **{k: summary.get(k) for k in ("classifier_paid_judged", "classifier_false_positives",
                                       "classifier_missed_successes", "classifier_refits")},  # to the run's end
        "standins_simulated_min": standins_s / 60.0,
        "curve": [{k: e[k] for k in ("env_steps", "confirm", "success_rate", "episodes")} for e in evals],
    }  # fmt: skip


def simulated_s(line: str) -> float:
    """The seconds a sim robot's closing log line says it ran (0 for any other line)."""
    if m := re.search(r"stopped after (\d+) ticks, ([\d.]+) s simulated", line):  # lockstep
        return float(m.group(2))
    m = re.search(r"sim robot stopped after (\d+) ticks", line)  # real time: 100 Hz physics
    return int(m.group(1)) / 100.0 if m else 0.0


if __name__ == "__main__":
    import argparse

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--robots", default="1,2,4", help="comma list of fleet sizes")
    p.add_argument("--seeds", default="0,1", help="comma list of training seeds")
    p.add_argument("--minutes", type=float, default=240.0, help="wall-clock budget of this call")
    p.add_argument("--realtime", action="store_true", help="the sim robots in real time, not lockstep")
    ns = p.parse_args()
    for row in main(ns.quick, ns.robots, ns.seeds, ns.minutes, ns.realtime):
        print({k: v for k, v in row.items() if k != "curve"})
