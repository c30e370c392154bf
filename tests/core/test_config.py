"""A wrong key, group or type fails at start-up and says what would have been valid."""

import pytest

from robot_rl.cli import main
from robot_rl.config import load_config
from robot_rl.errors import ConfigError


def test_defaults_compose_to_typed_config() -> None:
    cfg = load_config([])
    assert cfg.env.task == "PickCube" and cfg.env.obs == "state"
    assert cfg.sac.n_critics in (2, 10)  # profile picked by device


def test_group_and_dotted_overrides() -> None:
    cfg = load_config(["task=peg_insert", "obs=pixels", "sac.utd=3", "profile=gpu"])
    assert cfg.env.task == "PegInsert" and cfg.env.obs == "pixels" and cfg.sac.utd == 3
    assert cfg.sac.n_critics == 10


def test_unknown_key_lists_close_matches() -> None:
    with pytest.raises(ConfigError) as e:
        load_config(["sac.n_critic=3"])
    assert "did you mean sac.n_critics" in str(e.value)
    assert "\n" not in str(e.value)


def test_unknown_group_option_lists_choices() -> None:
    with pytest.raises(ConfigError) as e:
        load_config(["task=pick"])
    assert "pick_cube" in str(e.value) and "peg_insert" in str(e.value)


def test_every_command_takes_the_task_names_of_train() -> None:
    from robot_rl.configs import env_task, task_names, task_option

    for name, task in task_names().items():  # the table is the task group: what `train task=` composes
        assert load_config([f"task={name}"]).env.task == task
        assert task_option(name) == task_option(task) == name  # old scripts' CamelCase means the same task
    assert task_option("PegInsert", among=("PickCube", "PegInsert")) == "peg_insert"
    assert env_task("peg_insert") == "PegInsert" and env_task("push_t") == "push_t"  # foreign stores keep theirs


def test_wrong_type_says_the_expected_type() -> None:
    with pytest.raises(ConfigError, match="sac.utd=lots: expected int"):
        load_config(["sac.utd=lots"])


def test_out_of_range_value_is_rejected() -> None:
    with pytest.raises(ConfigError, match="loop.env_steps=-5: must be >= 1"):
        load_config(["loop.env_steps=-5"])


def test_num_envs_needs_the_batched_maniskill_actor() -> None:
    with pytest.raises(ConfigError, match="loop.num_envs=2 batches ManiSkill envs: add sim=maniskill"):
        load_config(["loop.num_envs=2"])
    with pytest.raises(ConfigError, match="set intervention.enabled=false"):
        load_config(["sim=maniskill", "task=PickCube-v1", "loop.num_envs=2"])
    cfg = load_config(["sim=maniskill", "task=PickCube-v1", "loop.num_envs=2", "intervention.enabled=false"])
    assert cfg.loop.num_envs == 2
    with pytest.raises(ConfigError, match="loop.num_envs=0: must be >= 1"):
        load_config(["loop.num_envs=0"])


def test_classifier_refits_need_a_robot_run_with_a_person_and_a_fleet_the_zenoh_plane(capsys) -> None:
    with pytest.raises(ConfigError, match="it needs robot=<name>, reward.source=classifier and an intervention.device"):
        load_config(["reward.source=classifier", "reward.refit_every=20"])
    with pytest.raises(ConfigError, match="reward.refit_steps=0: must be >= 1"):
        load_config(["reward.refit_steps=0"])
    robot = ["robot=sim", "obs=pixels", "reward.source=classifier", "reward.classifier_path=c.safetensors",
             "intervention.device=simulated", "reward.refit_every=20"]  # fmt: skip
    assert load_config(robot).reward.refit_every == 20
    assert main(["launch", *robot, "distributed.plane=ros2"]) == 2  # the fleet's verdicts ride on Zenoh
    assert "the actors' verdicts reach the learner on distributed.plane=zenoh only" in capsys.readouterr().err


def test_the_simulated_operator_is_an_oracle_unless_a_person_is_named() -> None:
    from robot_rl.loop.run import operator_name

    robot = ["robot=sim", "intervention.device=simulated"]
    assert load_config(robot).intervention.operator == "oracle" and operator_name(load_config(robot)) == "oracle"
    person = load_config([*robot, "intervention.operator=person", "intervention.person.reaction_s=0.3"])
    assert operator_name(person) == "person" and person.intervention.person.reaction_s == 0.3
    assert operator_name(load_config(["intervention.enabled=false"])) is None
    assert operator_name(load_config(["robot=sim", "intervention.device=keyboard"])) == "keyboard"
    with pytest.raises(ConfigError, match=r"^bad configuration: intervention.operator=human: expected one of oracle"):
        load_config([*robot, "intervention.operator=human"])
    with pytest.raises(ConfigError, match="intervention.operator=person .* needs intervention.device=simulated"):
        load_config(["intervention.operator=person"])
    with pytest.raises(ConfigError, match="intervention.person.miss_rate=1.5: a probability"):
        load_config([*robot, "intervention.person.miss_rate=1.5"])
    with pytest.raises(ConfigError, match="intervention.person.reaction_s=-1.0: must be >= 0"):
        load_config([*robot, "intervention.person.reaction_s=-1"])


def test_nodes_refuse_batched_envs(capsys) -> None:
    ok = ["sim=maniskill", "task=PickCube-v1", "loop.num_envs=2", "intervention.enabled=false"]
    assert main(["launch", *ok]) == 2
    assert "actor nodes step one env each" in capsys.readouterr().err


def test_train_help_lists_groups_and_common_keys(capsys) -> None:
    assert main(["train", "--help"]) == 0
    out = capsys.readouterr().out
    for group in ("algo", "task", "obs", "sim", "profile"):
        assert f"\n  {group} " in out
    assert "pick_cube*" in out and "loop.env_steps" in out and "8000" in out and "examples:" in out


def test_cli_exit_code_on_bad_key(capsys) -> None:
    assert main(["train", "loop.env_stepz=5"]) == 2
    assert "loop.env_steps" in capsys.readouterr().err


def test_robot_cells_need_a_robot_and_distinct_domains() -> None:
    assert load_config(
        ["robot=sim", "intervention.enabled=false", "distributed.cell_domains=[3,5]"]
    ).distributed.cell_domains == [3, 5]
    with pytest.raises(ConfigError, match=r"cell_domains=\[3\]: robot cells need robot=<name>"):
        load_config(["distributed.cell_domains=[3]"])
    with pytest.raises(ConfigError, match="distinct ROS domain ids"):
        load_config(["robot=sim", "intervention.enabled=false", "distributed.cell_domains=[3,3]"])
    with pytest.raises(ConfigError, match="stand-ins serve robot cells, which need robot=<name>"):
        load_config(["distributed.standins=true"])


def test_launch_serves_a_stand_in_with_the_runs_robot_task_and_cameras() -> None:
    from robot_rl.nodes.launch import standin_args

    robot = ["robot=sim", "robot.lockstep=true", "intervention.enabled=false"]
    cfg = load_config([*robot, "obs=pixels", "task=peg_insert"])
    args = standin_args(cfg, 7)
    assert args[:6] == ["sim-robot", "--robot", "sim", "--domain", "7", "--task"] and "--lockstep" in args
    assert cfg.env.task in args and args[args.index("--cameras") + 1] == ",".join(cfg.env.cameras)
