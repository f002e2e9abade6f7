from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from starforge.catalog.locks import LockState
from starforge.contract.errors import (
    BatchValidation,
    ConfigError,
    LockError,
    ParamError,
    UsageError,
)
from starforge.contract.profiles import Pool
from starforge.project import experiments
from starforge.project.lab import Lab
from starforge.project.validate import validate


def grpo_lab(new_lab: Callable[..., Lab]) -> Lab:
    return new_lab(experiments_={"g1": "trl/grpo"})


def test_the_grpo_template_validates_with_its_own_values(new_lab: Callable[..., Lab]) -> None:
    lab = grpo_lab(new_lab)
    got = validate(lab, experiments.load_experiment(lab, "g1"))
    assert got.lock.state is LockState.CURRENT
    assert got.hyperparams["learning_rate"] == 0.02  # from the template's config.yaml
    assert got.hyperparams["loss_type"] == "dapo"  # the declared default


def test_sets_override_the_config_and_never_touch_the_files(new_lab: Callable[..., Lab]) -> None:
    lab = grpo_lab(new_lab)
    config = (lab.root / "experiments/g1/config.yaml").read_text()
    got = validate(lab, experiments.load_experiment(lab, "g1"), ["learning_rate=0.001"])
    assert got.run_config["learning_rate"] == 0.001
    assert (lab.root / "experiments/g1/config.yaml").read_text() == config


def test_a_batch_that_does_not_divide_into_groups_names_keys_values_and_rule(
    new_lab: Callable[..., Lab],
) -> None:
    lab = grpo_lab(new_lab)
    with pytest.raises(BatchValidation) as err:
        validate(lab, experiments.load_experiment(lab, "g1"), ["num_generations=3"])
    assert "per_device_train_batch_size (8)" in err.value.message
    assert "divisible by num_generations (3)" in err.value.message


def test_checks_use_the_profiles_data_parallel_size(new_lab: Callable[..., Lab]) -> None:
    lab = grpo_lab(new_lab)
    exp = experiments.load_experiment(lab, "g1")
    pools = [
        Pool(name="all", profile="h200", series="h200", nodes=1, gpus_per_node=3, roles=["trainer"])
    ]
    sets = [
        "use_cpu=false",
        "per_device_train_batch_size=2",
        "num_generations=6",
        "per_device_eval_batch_size=2",
    ]
    validate(lab, exp, sets, pools=pools)  # 2 x 3 GPUs = 6: fits
    with pytest.raises(BatchValidation, match=r"processes \(1 without a profile\)"):
        validate(lab, exp, sets)  # unknown profile: one process, 2 is not a multiple of 6


def test_a_platform_owned_key_in_the_config_is_refused(new_lab: Callable[..., Lab]) -> None:
    lab = grpo_lab(new_lab)
    path = lab.root / "experiments/g1/config.yaml"
    path.write_text(path.read_text() + "output_dir: /tmp/mine\n")
    with pytest.raises(ConfigError, match="sets output_dir"):
        validate(lab, experiments.load_experiment(lab, "g1"))


def test_a_wrong_type_in_the_config_names_the_file_and_key(new_lab: Callable[..., Lab]) -> None:
    lab = grpo_lab(new_lab)
    path = lab.root / "experiments/g1/config.yaml"
    path.write_text(path.read_text().replace("max_steps: 20", "max_steps: twenty"))
    with pytest.raises(ParamError, match=r"experiments/g1/config\.yaml: max_steps"):
        validate(lab, experiments.load_experiment(lab, "g1"))


def test_an_incompatible_lock_says_how_to_upgrade(new_lab: Callable[..., Lab]) -> None:
    lab = grpo_lab(new_lab)
    lock = lab.root / "experiments/g1/method.lock.json"
    data = json.loads(lock.read_text())
    data["method"]["bindings"]["learning_rate"]["type"] = "int"
    lock.write_text(json.dumps(data))
    with pytest.raises(LockError) as err:
        validate(lab, experiments.load_experiment(lab, "g1"))
    assert "--upgrade-recipe" in (err.value.hint or "")


def test_a_framework_version_other_than_the_lock_says_to_upgrade(
    new_lab: Callable[..., Lab],
) -> None:
    lab = grpo_lab(new_lab)
    with pytest.raises(UsageError, match=r"locked to trl/grpo framework version 1\.16\.0"):
        validate(lab, experiments.load_experiment(lab, "g1"), framework_version="1.15.0")


def test_a_fork_keeps_the_method_and_files_but_not_outputs(new_lab: Callable[..., Lab]) -> None:
    lab = grpo_lab(new_lab)
    (lab.root / "experiments/g1/outputs").mkdir()
    (lab.root / "experiments/g1/outputs/x.bin").write_text("x")
    fork = experiments.new_experiment(lab, "g2", source="g1")
    assert fork.method is not None and fork.method.id == "trl/grpo"
    assert (fork.path / "train.py").is_file()
    assert not (fork.path / "outputs").exists()
