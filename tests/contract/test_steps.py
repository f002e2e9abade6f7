"""A pipeline's progress as `sf job ls` shows it, and the check of --then against a method."""

from __future__ import annotations

import pytest

from starforge.contract.errors import Rejected
from starforge.contract.steps import ActionNeeds, check_steps, progress

TRL = {"export": ActionNeeds(gpus=0), "eval": ActionNeeds(gpus=1, after=["export"])}


@pytest.mark.parametrize(
    ("root", "steps", "shown"),
    [
        ("running", [None, None], "0/2"),
        ("succeeded", ["running", None], "0/2"),
        ("succeeded", ["succeeded", "queued"], "1/2"),
        ("succeeded", ["succeeded", "succeeded"], "2/2"),
        ("succeeded", ["failed", None], "0/2!"),
        ("succeeded", ["succeeded", "failed"], "1/2!"),  # e.g. an eval gate that failed
        ("succeeded", ["stopped", None], "0/2!"),
        ("failed", [None, None], "0/2!"),
        ("succeeded", [None, None], "0/2!"),  # the first step was never made
        ("succeeded", [], ""),
    ],
)
def test_progress_counts_done_steps_and_marks_a_pipeline_that_stopped_short(
    root: str, steps: list[str | None], shown: str
) -> None:
    assert progress(root, steps) == shown


def test_a_pipeline_in_the_declared_order_passes() -> None:
    check_steps(["export", "eval"], TRL, "trl/sft")
    check_steps(["export"], TRL, "trl/sft")


def test_a_rejection_names_the_method_actions_and_the_fix() -> None:
    with pytest.raises(Rejected) as caught:
        check_steps(["deploy"], TRL, "trl/sft")
    assert "actions of trl/sft: export, eval" in (caught.value.hint or "")
    with pytest.raises(Rejected) as caught:
        check_steps(["eval"], TRL, "trl/sft")
    assert caught.value.hint == "write --then export --then eval"
