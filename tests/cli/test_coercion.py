"""A parameter's value that typer would keep as it is is kept without pydantic; every other value,
and every error, is typer's own (its adapter, built when first needed)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError
from typer import _adapters
from typer.models import OptionInfo

from starforge.cli.coercion import KEEP_TO_TYPER, as_is
from tests.conftest import Result


def typers(annotation: Any, info: OptionInfo, value: Any) -> Any:
    """What typer 0.29's own adapter answers for ``value`` (the exception's class if refused)."""
    try:
        return _adapters.build_leaf_adapter(annotation, info).validate_python(value)
    except ValidationError:
        return ValidationError


def agrees(annotation: Any, value: Any, info: OptionInfo | None = None) -> bool:
    info = info or OptionInfo()
    kept = as_is(annotation, info, value)
    if kept is KEEP_TO_TYPER:
        return True
    theirs = typers(annotation, info, value)
    return type(kept) is type(theirs) and kept == theirs


@given(st.one_of(st.text(), st.integers(), st.floats(allow_nan=False), st.booleans()))
def test_any_value_kept_here_is_what_typers_adapter_answers(value: Any) -> None:
    for annotation in (str, int, float, bool):
        assert agrees(annotation, value), (annotation, value)


@given(st.from_regex(r"[-+ ]?[0-9_]{0,20}[ .]?[0-9]{0,2}", fullmatch=True))
def test_a_number_typed_on_the_command_line_reads_as_typer_reads_it(text: str) -> None:
    assert agrees(int, text) and agrees(float, text)


@pytest.mark.parametrize(
    ("annotation", "value", "kept"),
    [
        (str, "r-7f3a", "r-7f3a"),
        (int, 20, 20),
        (int, "007", 7),
        (int, "-3", -3),
        (bool, False, False),
        (float, 0.5, 0.5),
    ],
)
def test_plain_values_are_kept_without_an_adapter(annotation: Any, value: Any, kept: Any) -> None:
    assert as_is(annotation, OptionInfo(), value) == kept
    assert agrees(annotation, value)


@pytest.mark.parametrize(
    ("annotation", "value", "info"),
    [
        (int, "abc", OptionInfo()),
        (int, "1_000", OptionInfo()),  # pydantic reads it; left to it
        (int, " 5", OptionInfo()),
        (int, 5, OptionInfo(min=1)),  # a range: typer checks it
        (int, "5", OptionInfo(parser=int)),  # a parser: typer calls it
        (float, 1, OptionInfo()),  # typer's adapter makes it a float
        (str, "\udcff", OptionInfo()),  # an undecodable argv byte: pydantic refuses it
        (bool, "yes", OptionInfo()),
        (list[str], ["a"], OptionInfo()),
    ],
)
def test_anything_else_is_left_to_typer(annotation: Any, value: Any, info: OptionInfo) -> None:
    assert as_is(annotation, info, value) is KEEP_TO_TYPER


def test_a_value_typer_refuses_keeps_typers_message(sf: Callable[..., Result]) -> None:
    got = sf("job", "ls", "--limit", "abc")
    assert got.code == 2
    assert got.err.splitlines()[0] == (
        "error: Invalid value for '--limit' / '-n': Input should be a valid integer, unable to "
        "parse string as an integer"
    )
