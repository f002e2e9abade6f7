from __future__ import annotations

import pytest

from starforge.contract import errors


@pytest.mark.parametrize("cls", sorted(errors.REGISTRY.values(), key=lambda c: c.code))
def test_every_error_round_trips_through_the_wire_as_its_own_class(
    cls: type[errors.StarForgeError],
) -> None:
    err = cls("what went wrong", hint="what to do", details={"field": "x"})
    back = errors.from_wire(err.to_wire(), status=cls.http_status)
    assert type(back) is cls
    assert (back.message, back.hint, back.details) == (
        "what went wrong",
        "what to do",
        {"field": "x"},
    )


def test_codes_are_unique() -> None:
    codes = [c.code for c in errors.REGISTRY.values()]
    assert len(codes) == len(set(codes))


def test_an_unknown_code_from_a_newer_server_keeps_its_message() -> None:
    back = errors.from_wire({"code": "future.thing", "message": "m"}, status=422)
    assert isinstance(back, errors.UsageError)
    assert back.message == "m"
