from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from starforge.contract.errors import ParamError, UsageError
from starforge.contract.params import Param, ParamType, parse_sets, resolve, split_set, suggest

PARAMS = {
    "learning_rate": Param(
        type=ParamType.FLOAT,
        path="learning_rate",
        default=1e-6,
        min=0,
        exclusive_min=True,
        doc="initial learning rate",
    ),
    "num_generations": Param(type=ParamType.INT, path="num_generations", default=8, min=2),
    "bf16": Param(type=ParamType.BOOL, path="bf16"),
    "tag": Param(type=ParamType.STR, path="run.tag"),
    "loss_type": Param(
        type=ParamType.ENUM, path="loss_type", default="dapo", choices=["grpo", "dapo", "dr_grpo"]
    ),
    "grpo.kl_coef": Param(type=ParamType.FLOAT, path="grpo.kl_coef", min=0),
    "top_p": Param(type=ParamType.FLOAT, path="top_p", min=0, max=1, exclusive_min=True),
    "seed": Param(type=ParamType.INT, path="seed", required=True),
}


def test_values_are_parsed_by_the_declared_type() -> None:
    got = parse_sets(
        PARAMS,
        ["learning_rate=1e-5", "num_generations=4", "bf16=yes", "tag=007", "loss_type=dr_grpo"],
    )
    assert got == {
        "learning_rate": 1e-5,
        "num_generations": 4,
        "bf16": True,
        "tag": "007",
        "loss_type": "dr_grpo",
    }


@pytest.mark.parametrize(
    ("text", "value"),
    [("true", True), ("1", True), ("YES", True), ("false", False), ("0", False), ("no", False)],
)
def test_bools_accept_the_usual_spellings(text: str, value: bool) -> None:
    assert parse_sets(PARAMS, [f"bf16={text}"]) == {"bf16": value}


def test_an_int_refuses_scientific_notation() -> None:
    with pytest.raises(ParamError, match="'1e3' is not a whole number"):
        parse_sets(PARAMS, ["num_generations=1e3"])


def test_a_numeric_looking_string_stays_a_string() -> None:
    assert parse_sets(PARAMS, ["tag=1e3"]) == {"tag": "1e3"}


def test_out_of_range_values_name_the_bound() -> None:
    with pytest.raises(ParamError, match="must be > 0"):
        parse_sets(PARAMS, ["learning_rate=0"])
    with pytest.raises(ParamError, match="must be <= 1"):
        parse_sets(PARAMS, ["top_p=1.5"])


def test_an_unknown_choice_lists_the_choices_in_the_hint() -> None:
    with pytest.raises(ParamError) as err:
        parse_sets(PARAMS, ["loss_type=ppo"])
    assert "grpo | dapo | dr_grpo" in (err.value.hint or "")


def test_a_typo_suggests_the_closest_names_not_all_of_them() -> None:
    with pytest.raises(ParamError) as err:
        parse_sets(PARAMS, ["learning_rat=1e-5"])
    assert err.value.hint == "did you mean `learning_rate`?"


def test_a_bare_key_finds_its_dotted_parameter() -> None:
    assert suggest("kl_coef", sorted(PARAMS)) == "did you mean `grpo.kl_coef`?"


@pytest.mark.parametrize("raw", ["learning_rate", "=3", " =3"])
def test_a_set_without_key_or_equals_is_a_usage_error(raw: str) -> None:
    with pytest.raises(UsageError):
        split_set(raw)


def test_resolution_order_is_set_then_config_then_default() -> None:
    config = {"num_generations": 4, "seed": 7, "loss_type": "grpo"}
    got = resolve(PARAMS, config, ["loss_type=dapo"])
    assert got["loss_type"] == "dapo"  # -s
    assert got["num_generations"] == 4  # config
    assert got["learning_rate"] == 1e-6  # default
    assert "bf16" not in got  # no value anywhere: left to the framework


def test_a_required_parameter_without_a_value_is_an_error() -> None:
    with pytest.raises(ParamError, match="'seed' is required"):
        resolve(PARAMS, {}, [])


def test_config_values_are_checked_against_the_declaration() -> None:
    with pytest.raises(ParamError, match=r"config\.yaml: num_generations"):
        resolve(PARAMS, {"seed": 1, "num_generations": 1}, [])


def test_yaml_scientific_floats_read_as_strings_are_numbers() -> None:
    assert resolve(PARAMS, {"seed": 1, "learning_rate": "1e-5"}, [])["learning_rate"] == 1e-5


def test_no_validate_takes_config_values_unchecked() -> None:
    got = resolve(PARAMS, {"seed": 1, "num_generations": 1}, [], strict=False)
    assert got["num_generations"] == 1


@given(st.integers(min_value=2, max_value=10**9))
def test_any_valid_int_round_trips(n: int) -> None:
    assert parse_sets(PARAMS, [f"num_generations={n}"]) == {"num_generations": n}


@given(st.floats(min_value=1e-12, max_value=1e6, allow_nan=False))
def test_any_positive_float_round_trips_through_its_repr(x: float) -> None:
    assert parse_sets(PARAMS, [f"learning_rate={x!r}"]) == {"learning_rate": x}


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30))
def test_a_str_parameter_keeps_any_text_exactly(text: str) -> None:
    assert parse_sets(PARAMS, [f"tag={text}"]) == {"tag": text}


@given(
    st.text(min_size=1, max_size=20).filter(
        lambda t: t.strip().lower() not in {"true", "false", "1", "0", "yes", "no", "on", "off"}
    )
)
def test_anything_else_is_not_a_bool(text: str) -> None:
    with pytest.raises(ParamError):
        parse_sets(PARAMS, [f"bf16={text}"])


@given(key=st.sampled_from(sorted(PARAMS)), value=st.text(max_size=10))
def test_the_last_set_of_a_key_wins_or_fails_loudly(key: str, value: str) -> None:
    try:
        got = parse_sets(PARAMS, [f"{key}={value}", f"{key}={value}"])
    except ParamError:
        return
    assert list(got) == [key]
