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


def test_every_error_class_with_a_code_is_registered_under_it() -> None:
    defined = [
        c
        for c in vars(errors).values()
        if isinstance(c, type) and issubclass(c, errors.StarForgeError)
    ]
    assert {c.code: c for c in defined} == errors.REGISTRY
    assert len({c.code for c in defined}) == len(defined)


def test_a_new_error_class_cannot_reuse_a_taken_code() -> None:
    before = dict(errors.REGISTRY)
    with pytest.raises(TypeError, match=r"'runs\.not_found' .* already taken by .*RunNotFound"):

        class StaleRun(errors.StarForgeError):
            code = "runs.not_found"

    assert before == errors.REGISTRY


def test_a_subclass_without_its_own_code_travels_as_its_parent() -> None:
    class LocalRunNotFound(errors.RunNotFound):
        pass

    assert errors.REGISTRY["runs.not_found"] is errors.RunNotFound
    back = errors.from_wire(LocalRunNotFound("gone").to_wire(), status=404)
    assert type(back) is errors.RunNotFound


def test_an_unknown_code_from_a_newer_server_keeps_its_message() -> None:
    back = errors.from_wire({"code": "future.thing", "message": "m"}, status=422)
    assert isinstance(back, errors.UsageError)
    assert back.message == "m"
