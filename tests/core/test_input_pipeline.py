"""The checkpoint owns its input pipeline (issue #54): a run started from it (`init_from`) reads frames and states
as the checkpoint's policy was trained to, or says why not. A `randomization=visual` policy standardises its frames;
a robot run whose config does not say so once fed it raw frames without a word and scored 0.00 where deploy scored
1.00 on the same cell."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from robot_rl.algos.sac import SAC
from robot_rl.checkpoint import Checkpoint
from robot_rl.commands.train import run_config
from robot_rl.config import FINETUNE_DEFAULTS, load_config
from robot_rl.errors import ConfigError, UserError
from robot_rl.loop.trainer import TrainingRun, train

pytestmark = pytest.mark.slow
ROBOT = ["robot=sim", "obs=pixels", "intervention.enabled=false", "threads=1"]


@pytest.fixture(scope="module")
def visual_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny camera run for the sim robot under the visual preset (it standardises frames)."""
    run = tmp_path_factory.mktemp("visual") / "run"
    train(load_config([f"run_dir={run}", "obs=pixels", "env.for_robot=sim", "randomization=visual",
                       "sac.compile=false", "sac.stored_views=1", "sac.trunk_pretrain_steps=5", "loop.env_steps=10",
                       "loop.eval_every=0", "loop.final_eval_episodes=1", "demos.n_episodes=1",
                       "loop.checkpoint_every=0", "threads=1"]))  # fmt: skip
    assert Checkpoint(run).pipeline["sac.normalize_frames"] is True
    return run


def test_a_run_from_a_checkpoint_takes_its_input_pipeline_and_says_so(
    visual_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    cfg = run_config([*ROBOT, f"init_from={visual_run}", f"run_dir={tmp_path / 'robot'}"])
    assert cfg.sac.normalize_frames is True and cfg.env.randomization.delay_compensation == 0.0
    assert cfg.init_from == str(visual_run / "checkpoints" / "final")  # the folder whose pipeline was read
    err = capsys.readouterr().err
    assert "taking its input pipeline, sac.normalize_frames=True (this run: False)" in err
    # ... and the fine-tuning defaults where the command line leaves them, said on a line; a value set is kept
    assert cfg.loop.learning_starts == FINETUNE_DEFAULTS["loop.learning_starts"] and "fine-tuning defaults" in err
    assert run_config([*ROBOT, f"init_from={visual_run}", "loop.learning_starts=7"]).loop.learning_starts == 7
    assert run_config(ROBOT).loop.learning_starts == 0  # a run from scratch: no warm-up
    with pytest.raises(UserError, match=r"trained with sac.normalize_frames=True \(this run: False\): drop that"):
        run_config([*ROBOT, f"init_from={visual_run}", "sac.normalize_frames=false"])


def test_the_robot_runs_policy_acts_as_the_checkpoint_deployed(visual_run: Path, tmp_path: Path) -> None:
    """The robot run's learner (no arm: its learner node's view) starts from the checkpoint's weights and pipeline:
    its policy's actions on the same frames are deploy's. Built from a config that skipped `robot-rl train`'s
    adoption, the run refuses in one line naming the field."""
    cfg = run_config([*ROBOT, f"init_from={visual_run}", f"run_dir={tmp_path / 'robot'}"])
    ours = TrainingRun(cfg).algo.policy.cpu().eval()
    theirs = Checkpoint(visual_run).policy()
    rng = np.random.default_rng(0)
    lay = Checkpoint(visual_run).layouts["policy"]
    for _ in range(3):
        frames = {c: rng.integers(0, 256, (lay.image_size, lay.image_size, 3), np.uint8) for c in lay.cameras}
        obs = {"state": rng.normal(size=lay.state_dim).astype(np.float32), **frames}
        with torch.no_grad():
            np.testing.assert_allclose(ours.select_action(obs, deterministic=True),
                                       theirs.select_action(obs, deterministic=True), atol=1e-5)  # fmt: skip
    raw = load_config([*ROBOT, f"init_from={visual_run}", f"run_dir={tmp_path / 'raw'}"])
    with pytest.raises(UserError, match=r"its policy was trained with sac.normalize_frames=True \(this run: False\)"):
        TrainingRun(raw)


def test_a_fine_tuned_actor_is_anchored_at_the_checkpoints_policy(visual_run: Path) -> None:
    """The fine-tuning defaults hold the encoder and anchor the actor at the policy the run starts from: the anchor
    is the checkpoint's actor, the encoder takes no gradient; a run from scratch has neither, and refuses an anchor."""
    cfg = run_config([*ROBOT, f"init_from={visual_run}"])
    assert cfg.sac.anchor == FINETUNE_DEFAULTS["sac.anchor"] > 0 and cfg.sac.frozen_encoder
    ckpt = Checkpoint(cfg.init_from)
    lay = ckpt.layouts["policy"]
    algo = SAC(cfg.sac, lay.state_dim, lay.action_dim, lay.cameras, lay.image_size)
    ckpt.start(algo, cfg, lay, torch.device("cpu"))
    theirs = {k.removeprefix("policy.head."): v for k, v in ckpt.weights().items() if k.startswith("policy.head.")}
    anchor = algo.anchor_head.state_dict()
    assert theirs.keys() == anchor.keys() and all(torch.equal(theirs[k], anchor[k]) for k in theirs)
    assert not any(p.requires_grad for p in algo.policy.encoder.parameters())
    plain = run_config(ROBOT)
    assert plain.sac.anchor == 0 and not plain.sac.frozen_encoder
    with pytest.raises(ConfigError, match=r"sac.anchor=0.1 holds the actor near the policy it starts from"):
        load_config([*ROBOT, "sac.anchor=0.1"])
