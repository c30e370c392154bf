"""Algorithms behind one registry (robot_rl/algos/registry.py): the product code asks `algorithm(cfg.algo)` and never
tests the name, every entry declares all its choices, and the callers pick by the entry."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest
import yaml
from omegaconf import OmegaConf

from robot_rl.algos.registry import ALGORITHMS, Algorithm, algorithm
from robot_rl.algos.sac import SAC, SACConfig, make_policy
from robot_rl.checkpoint import Checkpoint, save_checkpoint
from robot_rl.config import CHOICES, TrainConfig
from robot_rl.envs import make_env
from robot_rl.errors import UserError
from robot_rl.loop import adapters
from robot_rl.policies.chunked import ChunkPolicy
from robot_rl.policies.gaussian import GaussianPolicy
from robot_rl.types import ObsLayout

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("robot_rl", "sim", "real", "policies", "demos")  # pyproject's package folders with code
REGISTRY = ROOT / "robot_rl" / "algos" / "registry.py"
# `cfg.algo == "bc"`, `run.algo != ...`, `algo in ("residual", "dsrl")`, `algo not in (...)`
NAME_TEST = re.compile(r"\.algo\s*(==|!=)|\balgo\s+(not\s+)?in\s*[(\[{]")


def name_tests(source: str) -> list[int]:
    return [i for i, line in enumerate(source.splitlines(), 1) if NAME_TEST.search(line)]


def test_no_algorithm_name_test_outside_the_registry() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for folder in PRODUCT
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path != REGISTRY
        for line in name_tests(path.read_text())
    ]
    assert not found, (
        "ask `algorithm(cfg.algo)` (robot_rl/algos/registry.py) instead of testing the name:\n" + "\n".join(found)
    )


def test_the_name_test_grep_finds_planted_tests() -> None:
    planted = ['if cfg.algo == "bc":', 'x = a if run.algo != "dsrl" else b', 'if cfg.algo in ("residual", "dsrl"):',
               'if algo not in ("sac",):', "if algorithm(cfg.algo).offline:", "self.algo = algo"]  # fmt: skip
    assert name_tests("\n".join(planted)) == [1, 2, 3, 4]


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_every_algorithm_declares_its_choices(name: str) -> None:
    algo = algorithm(name)
    cfg = TrainConfig(algo=name)
    assert algo.name == name
    assert callable(algo.make) and algo.policy_config(cfg) is not None
    assert (algo.adapter is None) == (not algo.base_options), "an adapter wraps a frozen base, named in its options"
    if algo.base_options:
        assert hasattr(algo.options(cfg), "base")
        assert algo.problem(cfg) == f"algo={name} needs {algo.base_options}.base=<checkpoint folder of the frozen " \
                                    "base policy>"  # fmt: skip
    assert algo.env_policy is None or algo.base_options, "an env policy composes the agent with its base"
    assert not (algo.env_policy and algo.not_stepwise)
    assert callable(algo.convert_episode) and callable(algo.check)
    assert not (algo.offline and algo.adapter), "offline training steps no env"
    policy = algo.build_policy(cfg, 7, 4)
    assert isinstance(policy, ChunkPolicy if algo.offline else GaussianPolicy)


def test_the_registry_is_what_configs_offer() -> None:
    assert CHOICES["algo"] == tuple(ALGORITHMS)
    yamls = {yaml.safe_load(p.read_text())["algo"] for p in (ROOT / "configs" / "algo").glob("*.yaml")}
    assert yamls == set(ALGORITHMS)
    with pytest.raises(ValueError, match="expected one of sac | bc | residual | dsrl"):
        algorithm("ppo")


def test_dsrl_reads_its_noise_size_from_the_weights() -> None:
    weights = {f"policy.{k}": v for k, v in make_policy(SACConfig(), 9, 3).state_dict().items()}
    assert algorithm("dsrl").action_dim_from(weights) == 3
    assert algorithm("sac").action_dim_from is None


def test_an_old_dsrl_checkpoint_reads_its_noise_size_from_its_weights(tmp_path: Path) -> None:
    """A checkpoint from before layout.json: the env layout from a sim env, the agent's action size from its head."""
    cfg = TrainConfig(algo="dsrl")
    env = make_env(cfg.env)
    state_dim = ObsLayout.of_env(env).state_dim
    env.close()
    yaml_text = OmegaConf.to_yaml(OmegaConf.structured(cfg))
    ckpt = save_checkpoint(tmp_path, "final", SAC(SACConfig(), state_dim, 12), {}, {"env_steps": 0}, yaml_text)
    layouts = Checkpoint(ckpt).layouts
    assert (layouts["env"].action_dim, layouts["policy"].action_dim) == (4, 12)


def test_env_policy_picks_by_the_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    agent = make_policy(SACConfig(), 7, 4)
    assert adapters.env_policy(TrainConfig(algo="sac"), agent) is agent
    with pytest.raises(UserError, match="cannot run step by step"):
        adapters.env_policy(TrainConfig(algo="dsrl"), agent)
    composed = dataclasses.replace(ALGORITHMS["sac"], base_options="residual", env_policy=lambda b, a, o: (b, a, o))
    monkeypatch.setitem(ALGORITHMS, "sac", composed)
    monkeypatch.setattr(adapters, "load_base", lambda path, device: f"base at {path}")
    cfg = TrainConfig(algo="sac")
    cfg.residual.base = "somewhere"
    assert adapters.env_policy(cfg, agent) == ("base at somewhere", agent, cfg.residual)
    monkeypatch.setitem(ALGORITHMS, "sac", dataclasses.replace(composed, not_stepwise="not here"))
    with pytest.raises(UserError, match="not here"):
        adapters.env_policy(cfg, agent)


def test_a_checkpoint_builds_the_policy_the_registry_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lay = ObsLayout(state={"joints": (0, 7)}, action_dim=4)
    cfg = TrainConfig(algo="sac")
    yaml_text = OmegaConf.to_yaml(OmegaConf.structured(cfg))
    ckpt = save_checkpoint(tmp_path, "final", SAC(SACConfig(), 7, 4), {}, {"env_steps": 0}, yaml_text,
                           layouts={"env": lay, "policy": lay})  # fmt: skip
    built = []

    def make(options: SACConfig, *sizes: object) -> GaussianPolicy:
        built.append((options, sizes))
        return make_policy(options, *sizes)

    monkeypatch.setitem(ALGORITHMS, "sac", Algorithm("sac", make, "sac"))
    loaded = Checkpoint(ckpt)
    policy = loaded.policy()
    assert built == [(loaded.cfg.sac, (7, 4, (), 64))]
    action = policy.select_action({"state": np.zeros(7, np.float32)}, deterministic=True)
    assert action.shape == (4,)
