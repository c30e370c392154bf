"""The check residual RL and DSRL share with every base (diffusion policy, VLA): SAC updates run, the base stays put."""

from __future__ import annotations

import copy

import torch

from robot_rl.config import TrainConfig
from robot_rl.loop.actor import Actor
from robot_rl.loop.adapters import make_train_env
from robot_rl.loop.human import make_human
from robot_rl.loop.trainer import TrainingRun
from robot_rl.types import Transition


def run_and_check_base_frozen(cfg: TrainConfig, steps: int, obs_keys: set[str] | None = None) -> list[torch.nn.Module]:
    """Drives `steps` actor steps with learner updates; asserts the agent's head moved while no base parameter is in
    an optimiser, needs a gradient or changed. Returns the bases (train env's, eval env's) for further checks."""
    run = TrainingRun(cfg)
    env = make_train_env(cfg, seed=0)
    actor = Actor(env, copy.deepcopy(run.algo.policy), make_human(cfg, 0), seed=0)
    bases = [e.base if cfg.algo == "residual" else e.policy for e in (env, run.cell.eval_env)]
    before = {k: v.clone() for k, v in bases[0].state_dict().items()}
    trained = {id(p) for opt in run.algo.optimizers().values() for g in opt.param_groups for p in g["params"]}
    for base in bases:
        assert not trained & {id(p) for p in base.parameters()}
        assert all(not p.requires_grad for p in base.parameters())
    head_before = [p.clone() for p in run.algo.policy.head.parameters()]
    for _ in range(steps):
        t: Transition = actor.step()
        if obs_keys is not None:
            assert set(t.obs) == obs_keys
        run.learner.add(t)
        run.learner.train_to_rate_limit()
        actor.load_weights(run.learner.policy_weights(), run.learner.updates)
    run.bar.close()
    assert run.learner.updates > 0
    assert any(not torch.equal(a, b) for a, b in zip(head_before, run.algo.policy.head.parameters(), strict=True))
    for base in bases:
        for k, v in base.state_dict().items():
            assert torch.equal(v, before[k]), k
    return bases
