"""``sf submit --init-from``: a malformed reference is refused before anything is packed."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from starforge.cli.submit_flow import SubmitOptions, prepare
from starforge.contract.errors import MissingInput
from starforge.contract.lineage import parse_init_from
from starforge.project.lab import Lab
from tests.conftest import Result, commit_all


def test_a_malformed_init_from_is_a_usage_error_with_the_grammar(
    sf: Callable[..., Result], new_lab: Callable[..., Lab]
) -> None:
    lab = new_lab(experiments_={"d1": "trl/dpo"})

    got = sf("submit", "d1", "--profile", "h200:1", "--init-from", "r-abc/ckpt", cwd=lab.root)

    assert got.code == 2
    assert "--init-from 'r-abc/ckpt': expected run/RUN_ID/KIND[@step=N]" in got.err
    assert "Traceback" not in got.err


def test_init_from_stands_in_for_model_in_the_local_checks(new_lab: Callable[..., Lab]) -> None:
    lab = new_lab(experiments_={"d1": "trl/dpo"})
    (lab.root / "data").mkdir()
    for name in ("train.jsonl", "val.jsonl"):
        (lab.root / "data" / name).write_text('{"prompt": "p", "chosen": "a", "rejected": "b"}\n')
    commit_all(lab.root)
    data = {"train_data": "data/train.jsonl", "validation_data": "data/val.jsonl"}

    def opts(**kw: object) -> SubmitOptions:
        return SubmitOptions(experiment="d1", profiles=["h200:1"], cwd=lab.root, **data, **kw)  # type: ignore[arg-type]

    with pytest.raises(MissingInput, match="needs --model"):
        prepare(opts())
    got = prepare(opts(init_from="run/r-abc123/checkpoint@step=5"))
    assert got.spec.init_from == parse_init_from("run/r-abc123/checkpoint@step=5")
    assert got.spec.inputs.model is None
