"""The schema comparison behind the release tests (tests/wire_compat.py) finds each kind of break
between two releases, in the direction it breaks, and nothing where a change is compatible."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import Field

from starforge.contract.base import Contract
from tests.wire_compat import breaks

ROUTE = "POST /runs"


def wire(request: type[Contract], answer: type[Contract]) -> dict[str, Any]:
    """A one-route API taking ``request`` and answering ``answer``, as FastAPI documents it."""
    schemas: dict[str, Any] = {}
    op: dict[str, Any] = {}
    for model, mode, slot in ((request, "validation", "in"), (answer, "serialization", "out")):
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}", mode=mode)
        schemas.update(schema.pop("$defs", {}))
        schemas[f"{model.__name__}-{slot}"] = schema
        ref = {"$ref": f"#/components/schemas/{model.__name__}-{slot}"}
        content = {"content": {"application/json": {"schema": ref}}}
        if slot == "in":
            op["requestBody"] = content
        else:
            op["responses"] = {"201": content}
    return {"openapi": {"paths": {"/runs": {"post": op}}, "components": {"schemas": schemas}}}


class Status(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"


class StatusNext(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    HIBERNATING = "hibernating"


class Submit(Contract):
    name: str
    retries: int = 0


class Run(Contract):
    run_id: str
    status: Status
    reason: str = ""


OLD = wire(Submit, Run)


def test_identical_releases_break_nothing() -> None:
    assert breaks(OLD, OLD, clients=True, servers=True) == []


def test_a_new_answer_field_reads_in_the_old_client_and_its_absence_in_the_new_one() -> None:
    class RunNext(Run):
        cost: float = 0.0
        tags: list[Literal["a", "b"]] = Field(default_factory=list)

    assert breaks(OLD, wire(Submit, RunNext), clients=True, servers=True) == []


def test_a_new_status_value_breaks_only_the_old_client() -> None:
    class RunNext(Contract):
        run_id: str
        status: StatusNext
        reason: str = ""

    new = wire(Submit, RunNext)
    assert breaks(OLD, new, clients=True, servers=True) == [
        f"{ROUTE} answer -> old client.status: ['hibernating'] unknown to the reader"
    ]
    assert breaks(OLD, new, clients=False, servers=True) == []


def test_an_answer_field_that_may_now_be_null_breaks_the_old_client() -> None:
    class RunNext(Contract):
        run_id: str
        status: Status | None = None
        reason: str = ""

    assert breaks(OLD, wire(Submit, RunNext), clients=True, servers=False) == [
        f"{ROUTE} answer -> old client.status: null where the reader needs a value"
    ]


def test_a_new_required_answer_field_breaks_the_new_client_of_an_old_server() -> None:
    class RunNext(Run):
        node: int

    assert breaks(OLD, wire(Submit, RunNext), clients=True, servers=True) == [
        f"old server {ROUTE} answer -> new client.node: required by the reader, not sent"
    ]


def test_a_new_optional_request_field_is_refused_only_by_the_old_server() -> None:
    class SubmitNext(Submit):
        priority: int = 0

    new = wire(SubmitNext, Run)
    assert breaks(OLD, new, clients=True, servers=False) == []
    assert breaks(OLD, new, clients=False, servers=True) == [
        f"new client -> old server {ROUTE} request.priority: sent, refused by the reader as unknown"
    ]


def test_a_request_field_made_required_or_removed_breaks_the_old_client() -> None:
    class SubmitNext(Contract):
        name: str
        user: str

    assert breaks(OLD, wire(SubmitNext, Run), clients=True, servers=False) == [
        f"old client -> {ROUTE} request.user: required by the reader, not sent",
        f"old client -> {ROUTE} request.retries: sent, refused by the reader as unknown",
    ]


def test_a_new_value_the_server_tells_old_clients_otherwise_breaks_nothing_for_them() -> None:
    class RunNext(Contract):
        run_id: str
        status: StatusNext
        reason: str = ""

    new = wire(Submit, RunNext)
    told = frozenset({"hibernating"})
    assert breaks(OLD, new, clients=True, servers=True, told_otherwise=told) == []
    assert breaks(OLD, new, clients=True, servers=True, told_otherwise=frozenset({"x"})) == [
        f"{ROUTE} answer -> old client.status: ['hibernating'] unknown to the reader"
    ]
