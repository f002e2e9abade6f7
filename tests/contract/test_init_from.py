"""``--init-from run/RUN_ID/KIND[@step=N]``: the grammar, compatibility, and the stored spec."""

from __future__ import annotations

import pytest

from starforge.contract.errors import Rejected, UsageError
from starforge.contract.lineage import (
    ArtifactKind,
    InitFrom,
    as_submitted,
    check_compatible,
    incompatibility,
    parse_init_from,
)


@pytest.mark.parametrize(
    ("text", "run_id", "kind", "step"),
    [
        ("run/r-abc123/checkpoint", "r-abc123", ArtifactKind.CHECKPOINT, None),
        ("run/r-abc123/checkpoint@step=20", "r-abc123", ArtifactKind.CHECKPOINT, 20),
        ("run/abc123/export", "r-abc123", ArtifactKind.EXPORT, None),
        (" run/r-x/checkpoint@step=0 ", "r-x", ArtifactKind.CHECKPOINT, 0),
    ],
)
def test_the_flag_parses_to_run_kind_and_step(
    text: str, run_id: str, kind: ArtifactKind, step: int | None
) -> None:
    init = parse_init_from(text)
    assert (init.run_id, init.kind, init.step) == (run_id, kind, step)
    assert init.path == "" and init.resolved_step is None
    assert parse_init_from(init.ref) == init  # the ref spells the flag back


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("r-abc/checkpoint", "expected run/RUN_ID/KIND[@step=N]"),
        ("run/r-abc", "expected run/RUN_ID/KIND[@step=N]"),
        ("run/r-abc/checkpoint@step=-1", "expected run/RUN_ID/KIND[@step=N]"),
        ("run/r-abc/checkpoint@5", "expected run/RUN_ID/KIND[@step=N]"),
        ("run/../checkpoint", "expected run/RUN_ID/KIND[@step=N]"),
        ("run/r-abc/weights", "unknown artifact kind 'weights'"),
        ("run/r-abc/export@step=3", "an export has no step"),
    ],
)
def test_a_malformed_flag_is_a_usage_error_with_the_grammar(text: str, says: str) -> None:
    with pytest.raises(UsageError) as raised:
        parse_init_from(text)
    assert says in str(raised.value) and raised.value.exit_code == 2
    assert "--init-from run/" in (raised.value.hint or "")


@pytest.mark.parametrize(
    ("parent", "child", "kind", "compatible"),
    [
        ("trl/sft", "trl/dpo", ArtifactKind.CHECKPOINT, True),
        ("trl/dpo", "trl/grpo", ArtifactKind.EXPORT, True),
        ("trl/sft", "verl/grpo", ArtifactKind.EXPORT, True),
        ("trl/sft", "verl/grpo", ArtifactKind.CHECKPOINT, False),
        ("verl/grpo", "verl/grpo", ArtifactKind.CHECKPOINT, True),
        ("verl/grpo", "verl/ppo", ArtifactKind.CHECKPOINT, False),
        ("custom/custom", "trl/sft", ArtifactKind.CHECKPOINT, False),
    ],
)
def test_compatibility_of_parent_and_child_methods(
    parent: str, child: str, kind: ArtifactKind, compatible: bool
) -> None:
    assert (incompatibility(parent, child, kind) is None) is compatible


def test_an_incompatible_parent_is_rejected_naming_both_methods() -> None:
    init = parse_init_from("run/r-abc/checkpoint")
    with pytest.raises(Rejected) as raised:
        check_compatible("trl/sft", "verl/grpo", init)
    assert "a trl checkpoint (trl/sft) cannot start a verl run (verl/grpo)" in str(raised.value)
    assert "run/r-abc/export" in (raised.value.hint or "")


def test_as_submitted_undoes_the_servers_resolution_only() -> None:
    asked = InitFrom(run_id="r-abc", kind=ArtifactKind.CHECKPOINT)
    stored = {
        "experiment": "demo",
        "init_from": asked.model_copy(
            update={
                "path": "/storage/runs/out/checkpoints/checkpoint-20",
                "resolved_step": 20,
                "parent_method": "trl/sft",
            }
        ).model_dump(mode="json"),
    }
    assert as_submitted(stored) == {
        "experiment": "demo",
        "init_from": asked.model_dump(mode="json"),
    }
    assert as_submitted({"experiment": "demo", "init_from": None})["init_from"] is None


def test_describe_names_the_artifact_the_step_and_the_parent() -> None:
    init = InitFrom(
        run_id="r-abc",
        kind=ArtifactKind.CHECKPOINT,
        resolved_step=20,
        parent_method="trl/sft",
        path="<root>/out/checkpoints/checkpoint-20",
    )
    assert init.describe() == (
        "checkpoint step 20 of run r-abc (trl/sft) at <root>/out/checkpoints/checkpoint-20"
    )
