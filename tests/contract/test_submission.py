"""The one submission check: each rule refuses with the same class and exit code everywhere."""

from __future__ import annotations

from typing import Any

import pytest

from starforge.catalog.loader import get_method
from starforge.contract.errors import (
    ImageError,
    MissingEntrypoint,
    MissingInput,
    ParamError,
    ProfileError,
    StarForgeError,
)
from starforge.contract.jobspec import InputKind, InputRef, Inputs, JobSpec, Provenance
from starforge.contract.profiles import parse_profile_args
from starforge.contract.submission import check_submission

HUB = InputRef(kind=InputKind.HUB, value="org/model")
ALL_INPUTS = Inputs(model=HUB, train_data=HUB, validation_data=HUB)


def spec(method_id: str = "custom/custom", **fields: Any) -> JobSpec:
    fields.setdefault("image", "registry.example/train:v1" if method_id == "custom/custom" else "")
    fields.setdefault("inputs", Inputs() if method_id == "custom/custom" else ALL_INPUTS)
    return JobSpec(
        project="proj",
        experiment="exp",
        method=get_method(method_id).ref(),
        profiles=fields.pop("profiles", ["h200:8"]),
        provenance=Provenance(git_commit="a" * 40, client_version="0.1.0"),
        **fields,
    )


def check(job: JobSpec, package: set[str] | None = None) -> None:
    method = get_method(job.method.id)
    entry = f"{job.exp_dir}/{method.entrypoint.file}"
    check_submission(
        job,
        method,
        requests=parse_profile_args(job.profiles),
        package={entry} if package is None else package,
    )


def refused(job: JobSpec, kind: type[StarForgeError], **kw: Any) -> StarForgeError:
    with pytest.raises(kind) as err:
        check(job, **kw)
    assert err.value.exit_code == 2  # a refused submission is a usage error on either side
    return err.value


def test_a_complete_submission_passes_every_rule() -> None:
    check(spec())
    check(spec("trl/grpo", hyperparams={"learning_rate": 1e-5}))


def test_required_inputs_are_named_by_their_flags() -> None:
    err = refused(spec("trl/grpo", inputs=Inputs(model=HUB)), MissingInput)
    assert err.code == "usage.missing_input"
    assert err.details["missing"] == ["--train-data", "--validation-data"]
    assert "--train-data, --validation-data" in err.message and "--model" not in err.message


def test_a_method_that_runs_your_own_code_needs_an_image() -> None:
    err = refused(spec(image=""), MissingInput)
    assert err.details["missing"] == ["--image"] and "--image" in err.message


def test_a_malformed_image_reference_is_refused() -> None:
    refused(spec(image="Not An Image!"), ImageError)


def test_an_entrypoint_missing_from_the_package_is_named() -> None:
    err = refused(spec(), MissingEntrypoint, package={"experiments/exp/other.py"})
    assert err.code == "usage.missing_entrypoint"
    assert "experiments/exp/train.sh" in err.message


def test_an_entrypoint_shipped_with_the_framework_needs_no_file_in_the_package() -> None:
    check(spec("verl/grpo"), package=set())


def test_an_undeclared_parameter_is_refused_with_a_suggestion() -> None:
    err = refused(spec("trl/grpo", hyperparams={"learning_rte": 1e-5}), ParamError)
    assert "learning_rte" in err.message and "learning_rate" in (err.hint or "")


def test_a_parameter_out_of_its_range_is_refused() -> None:
    err = refused(spec("trl/grpo", hyperparams={"learning_rate": -1.0}), ParamError)
    assert "learning_rate" in err.message


def test_a_profile_naming_a_role_the_method_lacks_is_refused() -> None:
    err = refused(spec(profiles=["rollout=h200:8"]), ProfileError)
    assert "rollout" in err.message and "trainer" in (err.hint or "")


def test_named_pools_must_carry_every_role_of_the_method() -> None:
    job = spec("verl/grpo", profiles=["actor=h200:8", "rollout=h200:8"])
    err = refused(job, ProfileError, package=set())
    assert "reference" in err.message
