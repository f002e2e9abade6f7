"""``sf sweep``'s local half: the grid is a typed cartesian product, capped, checked like ``-s``."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from starforge.catalog.loader import get_method
from starforge.cli.cmd_sweep import plan_variants
from starforge.cli.submit_flow import SubmitOptions, prepare
from starforge.contract.errors import ParamError, UsageError
from starforge.contract.sweeps import MAX_VARIANTS, expand, parse_grid, split_axis
from starforge.project.lab import Lab
from tests.conftest import Result, commit_all

SFT = get_method("trl/sft").params


def test_two_axes_make_their_cartesian_product_in_axis_order() -> None:
    grid = parse_grid(SFT, ["learning_rate=1e-5,3e-5", "max_length=64,128,256"])
    variants = expand(grid)
    assert len(variants) == 6
    assert variants[0] == {"learning_rate": 1e-5, "max_length": 64}
    assert variants[-1] == {"learning_rate": 3e-5, "max_length": 256}
    assert len({tuple(v.items()) for v in variants}) == 6


def test_values_are_typed_by_the_method_declaration() -> None:
    grid = parse_grid(SFT, ["max_length=64,128", "packing=true,false", "learning_rate=1e-5"])
    assert grid == {"max_length": [64, 128], "packing": [True, False], "learning_rate": [1e-5]}
    assert all(type(v) is int for v in grid["max_length"])


def test_a_value_out_of_range_is_refused_like_a_set_value() -> None:
    with pytest.raises(ParamError) as err:
        parse_grid(SFT, ["learning_rate=1e-5,-1"])
    assert "learning_rate" in err.value.message


def test_an_unknown_key_gets_a_did_you_mean() -> None:
    with pytest.raises(ParamError) as err:
        parse_grid(SFT, ["learning_rat=1e-5,2e-5"])
    assert "learning_rate" in (err.value.hint or "")


def test_a_grid_over_64_variants_is_refused_with_its_size() -> None:
    grid = parse_grid(
        SFT, ["max_length=1,2,3,4,5", "learning_rate=1e-5,2e-5,3e-5,4e-5", "warmup_steps=0,1,2,3"]
    )
    with pytest.raises(UsageError) as err:
        expand(grid)
    assert "80 variants" in err.value.message and f"at most {MAX_VARIANTS}" in err.value.message
    assert len(expand(grid, cap=80)) == 80


@pytest.mark.parametrize(
    ("raw", "why"),
    [("lr", "KEY=VALUE"), ("max_length=1,,2", "empty value"), ("max_length=1,1", "twice")],
)
def test_malformed_axes_are_usage_errors(raw: str, why: str) -> None:
    with pytest.raises(UsageError) as err:
        split_axis(raw)
    assert why in err.value.message


def sft_lab(new_lab: Callable[..., Lab]) -> Lab:
    lab = new_lab(experiments_={"s1": "trl/sft"})
    (lab.root / "data").mkdir()
    for name in ("train.jsonl", "val.jsonl"):
        (lab.root / "data" / name).write_text('{"prompt": "a", "completion": "b"}\n')
    commit_all(lab.root, "data")
    return lab


def test_variants_are_planned_against_the_prepared_experiment(
    new_lab: Callable[..., Lab],
) -> None:
    lab = sft_lab(new_lab)
    prepared = prepare(
        SubmitOptions(
            experiment="s1",
            profiles=["h200:1"],
            cwd=lab.root,
            model="org/model",
            train_data="data/train.jsonl",
            validation_data="data/val.jsonl",
            sets=["weight_decay=0.1"],
        )
    )
    variants = plan_variants(prepared, ["learning_rate=1e-5,3e-5", "max_length=64,128,256"], [])
    assert len(variants) == 6
    assert prepared.spec.hyperparams["weight_decay"] == 0.1  # shared by every variant
    with pytest.raises(ParamError) as err:
        plan_variants(prepared, ["weight_decay=0,0.2"], ["weight_decay=0.1"])
    assert "both swept (-g) and fixed (-s)" in err.value.message


@pytest.mark.parametrize(
    ("axis", "says"),
    [
        ("learning_rate=1e-5,abc", "-g learning_rate=abc: 'abc' is not a number"),
        ("learning_rat=1e-5", "-g learning_rat: the method has no parameter"),
        ("learning_rate", "-g 'learning_rate': expected KEY=VALUE"),
    ],
)
def test_a_bad_grid_value_is_reported_under_the_flag_the_user_wrote(
    sf: Callable[..., Result], new_lab: Callable[..., Lab], axis: str, says: str
) -> None:
    lab = sft_lab(new_lab)
    got = sf(
        "sweep", "s1", "-g", axis, "--profile", "h200:1", "--model", "org/model",
        "--train-data", "data/train.jsonl", "--validation-data", "data/val.jsonl", "--dry-run",
        cwd=lab.root,
    )  # fmt: skip
    assert got.code == 2
    assert says in got.err and "-s " not in got.err, got.err
