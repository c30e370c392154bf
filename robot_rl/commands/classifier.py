"""`robot-rl classifier train STORE --out FILE | eval CLASSIFIER STORE`: a success classifier from frames a person
labelled (`collect --label-frames N`), for robot runs."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from robot_rl.commands.common import add_out, resolve_out
from robot_rl.errors import UserError


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="robot-rl classifier", description="a success classifier from frames a person "
                                "labelled, for robot runs")  # fmt: skip
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train", help="train on labelled frames, pick a threshold, report held-out episodes")
    t.add_argument("store", type=Path, help="a store recorded with `collect --label-frames N`")
    add_out(t, "the classifier file to write (.safetensors): reward.classifier_path=", positional_before=True)
    t.add_argument("--cameras", default=None, help="comma-separated cameras (default: all the store recorded)")
    t.add_argument("--steps", type=int, default=1500, help="gradient steps")
    t.add_argument("--max-fpr", type=float, default=0.01, help="false-positive rate the threshold allows")
    t.add_argument("--val", type=float, default=0.2, help="fraction of episodes that pick the threshold")
    t.add_argument("--test", type=float, default=0.2, help="fraction of episodes held out for the report")
    t.add_argument("--key-lag-s", type=float, default=None, help="frames this long before a success label turns on "
                   "are left out: a person's key lags what they see (default: 1 s where a person labelled, 0 where "
                   "an oracle did: the scripted device, the simulated operator without --operator person)")  # fmt: skip
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--threads", type=int, default=0, help="torch threads (0: the fastest count, measured, as `train`)")
    e = sub.add_parser("eval", help="precision / recall / false-positive rate on a labelled store")
    e.add_argument("classifier", type=Path)
    e.add_argument("store", type=Path)
    e.add_argument("--threshold", type=float, default=None, help="instead of the one saved with the classifier")
    return p


LOW_RECALL = 0.5  # of the test episodes' success frames paid at the threshold


def warn_of_low_recall(report: dict) -> None:
    """One line where the classifier pays few of the test episodes' successes at its threshold: a run rewarded by it
    sees little reward, and a policy fine-tuned on it unlearns (a drawn cell's, paying none, took two sim policies from
    0.62 and 0.50 to 0.00 in 3600 steps)."""
    recall = report["test"]["recall"]
    if recall is not None and recall < LOW_RECALL:
        half = report["test_at_0.5"]
        print(f"warning: at its threshold {report['threshold']:.4g} the classifier pays {recall:.0%} of the test "
              f"episodes' success frames (at 0.5: {half['recall']:.0%}, with {half['false_positive_rate']:.0%} false "
              "positives): label more frames or collect more demos, or set reward.threshold",
              file=sys.stderr)  # fmt: skip


def main(argv: list[str]) -> int:
    p = build_parser()
    ns = p.parse_args(argv)
    if ns.cmd == "train":
        import torch

        from robot_rl.hardware import fastest_threads
        from robot_rl.loop.classifier import train_classifier

        resolve_out(p, ns)
        lag = ns.key_lag_s if ns.key_lag_s is not None else 0.0
        if ns.steps < 1 or not 0.0 <= ns.max_fpr < 1.0 or not (0 < ns.val < 1 and 0 < ns.test < 1) or lag < 0:
            raise UserError("--steps must be >= 1, --max-fpr in [0, 1), --val and --test in (0, 1), --key-lag-s >= 0")
        cams = [c for c in ns.cameras.split(",") if c] if ns.cameras is not None else None
        torch.set_num_threads(ns.threads or fastest_threads())  # oversubscribed threads crawl on a small box
        report = train_classifier(ns.store, ns.out, cameras=cams, steps=ns.steps, max_fpr=ns.max_fpr,
                                  val_frac=ns.val, test_frac=ns.test, key_lag_s=ns.key_lag_s, seed=ns.seed)  # fmt: skip
        print(f"saved {ns.out}; test episodes {report['episodes']['test']}: {report['test']}", file=sys.stderr)
        warn_of_low_recall(report)
    else:
        from robot_rl.loop.classifier import eval_classifier

        report = eval_classifier(ns.classifier, ns.store, ns.threshold)
    print(json.dumps(report, indent=1))
    return 0
