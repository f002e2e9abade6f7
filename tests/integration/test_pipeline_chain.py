"""The chain through exports on the tiny model: trl/sft ``--then export``, then trl/dpo
``--init-from run/<sft>/export --then export``, then trl/grpo ``--init-from run/<dpo>/export``:
each run trains from its parent's exported folder and records that parent (``sf job status``
lineage line and ``--json``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from starforge.project import experiments
from starforge.project.lab import Lab
from tests.conftest import Result, commit_all
from tests.integration.conftest import wait_for
from tests.tiny_inputs import prepare_experiment

pytestmark = [pytest.mark.integration, pytest.mark.training]

ENDED = {"succeeded", "failed", "stopped"}
SHORT = ["-p", "h200:1", "-s", "max_steps=2", "--json"]


def finished(sf: Callable[..., Result], run_id: str) -> dict[str, object]:
    """Wait for ``run_id`` to end; its view, after asserting it succeeded (else its log)."""
    view = wait_for(sf, run_id, ENDED, timeout=900)
    assert view["status"] == "succeeded", sf("job", "logs", run_id, "--no-follow").out[-3000:]
    return view


def submitted(sf: Callable[..., Result], lab: Lab, *args: str) -> str:
    got = sf("submit", *args, *SHORT, cwd=lab.root)
    assert got.code == 0, got.err
    return str(got.json()["run_id"])  # type: ignore[index]


def exported(sf: Callable[..., Result], run_id: str) -> Path:
    """The export folder of ``run_id``'s export step, once training and the step succeeded."""
    finished(sf, run_id)
    step = str(sf("job", "status", run_id, "--json").json()["steps"][0]["run_id"])  # type: ignore[index]
    folder = Path(str(finished(sf, step)["run_dir"])) / "out" / "export"
    assert (folder / "config.json").is_file() and (folder / "model.safetensors").is_file()
    return folder


def lineage(sf: Callable[..., Result], run_id: str) -> dict[str, object] | None:
    view = sf("job", "status", run_id, "--json").json()
    assert isinstance(view, dict)
    spec = view["spec"]
    assert isinstance(spec, dict)
    return spec.get("init_from")


def test_sft_then_dpo_then_grpo_each_from_the_previous_export_records_its_parent(
    sf: Callable[..., Result], new_lab: Callable[..., Lab]
) -> None:
    lab = new_lab()
    for exp, method in (("s1", "trl/sft"), ("d1", "trl/dpo"), ("g1", "trl/grpo")):
        experiments.new_experiment(lab, exp, method)
        prepare_experiment(lab.root, exp)
    commit_all(lab.root, "add s1, d1 and g1")

    sft = submitted(sf, lab, "s1", "--model", "models/tiny-llama",
                    "--train-data", "data/sft-train.jsonl",
                    "--validation-data", "data/sft-val.jsonl", "--then", "export")  # fmt: skip
    sft_export = exported(sf, sft)
    dpo = submitted(sf, lab, "d1", "--init-from", f"run/{sft}/export",
                    "--train-data", "data/dpo-train.jsonl",
                    "--validation-data", "data/dpo-val.jsonl", "--then", "export")  # fmt: skip
    dpo_export = exported(sf, dpo)
    grpo = submitted(sf, lab, "g1", "--init-from", f"run/{dpo}/export",
                     "--train-data", "data/train.jsonl",
                     "--validation-data", "data/val.jsonl")  # fmt: skip
    finished(sf, grpo)

    for child, parent, method, folder in ((dpo, sft, "trl/sft", sft_export),
                                          (grpo, dpo, "trl/dpo", dpo_export)):  # fmt: skip
        init = lineage(sf, child)
        assert init is not None
        assert (init["run_id"], init["kind"], init["parent_method"]) == (parent, "export", method)
        assert init["path"] == str(folder)
        line = f"started from export of run {parent} ({method})"
        assert line in sf("job", "status", child).out
        log = sf("job", "logs", child, "--no-follow").out
        assert f"model={folder} " in log  # trained the parent's exported weights
    assert lineage(sf, sft) is None  # the first stage started from --model
