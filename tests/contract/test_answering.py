"""Answers in the words of their reader: a client older than the release that added an end
reason is told the one it knows; this release's clients, and every write outside a request,
keep the value as it is."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from starforge.contract import answering
from starforge.contract.api import AttemptView, LifecycleEvent, RunView, StreamEnd
from starforge.contract.states import NEWER_VALUES, EndReason, JobStatus
from starforge.contract.sweeps import VariantView

ANSWERS = [
    RunView(
        run_id="r-1", user="u", project="p", experiment="e", method="m",
        status=JobStatus.STOPPED, end_reason=EndReason.EARLY_STOPPED, profiles=[],
        created_at=datetime(2025, 1, 1, tzinfo=UTC),
        attempts=[AttemptView(number=1, log_path="x", end_reason=EndReason.EARLY_STOPPED)],
    ),
    StreamEnd(status=JobStatus.STOPPED, end_reason=EndReason.EARLY_STOPPED),
    VariantView(
        run_id="r-1", index=0, params={}, status=JobStatus.STOPPED,
        end_reason=EndReason.EARLY_STOPPED,
    ),
]  # fmt: skip


def end_reasons(text: str) -> list[str]:
    found: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            found.extend(str(v) for k, v in node.items() if k == "end_reason")
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(json.loads(text))
    return found


def test_a_client_before_0_2_0_is_told_stopped_by_user_for_an_early_stop() -> None:
    for answer in ANSWERS:
        with answering.reader("0.1.0"):
            told = answer.model_dump_json()
        assert end_reasons(told) and set(end_reasons(told)) == {"stopped_by_user"}, told


def test_this_releases_client_and_writes_outside_a_request_keep_early_stopped() -> None:
    for answer in ANSWERS:
        with answering.reader("0.2.0"):
            assert set(end_reasons(answer.model_dump_json())) == {"early_stopped"}
        assert set(end_reasons(answer.model_dump_json())) == {"early_stopped"}
        # and what an older server's answer or this one says reads back as it was
        assert type(answer).read(json.loads(answer.model_dump_json())) == answer


def test_a_client_header_that_is_no_version_is_answered_as_this_release() -> None:
    assert answering.for_reader(EndReason.EARLY_STOPPED, "dev") is EndReason.EARLY_STOPPED
    assert answering.for_reader(EndReason.OOM, "0.1.0") is EndReason.OOM


def test_every_newer_value_names_an_older_one_and_is_unknown_only_to_older_clients() -> None:
    for value, (since, older) in NEWER_VALUES.items():
        assert older not in NEWER_VALUES and older is not value
        assert value.value in answering.unknown_to("0.1.0")
        assert value.value not in answering.unknown_to(since)


def test_a_runner_cannot_claim_an_early_stop() -> None:
    body = {"attempt": 1, "event": "exited", "exit_code": 143, "end_reason": "early_stopped"}
    with pytest.raises(ValidationError, match="end_reason"):
        LifecycleEvent.model_validate(body)
    ok = LifecycleEvent.model_validate({**body, "end_reason": "oom"})
    assert ok.end_reason is EndReason.OOM
