"""``--then export --then eval`` on the tiny model with a gate set out of reach: the eval step
writes its report (metrics, the gate's reason) and fails, and ``sf job ls`` shows the pipeline
stopped short with ``!``. Needs the steps machinery (``starforge.contract.steps``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from starforge.project import experiments
from starforge.project.lab import Lab
from tests.conftest import Result, commit_all
from tests.integration.conftest import wait_for
from tests.tiny_inputs import prepare_experiment

pytest.importorskip("starforge.contract.steps")
pytestmark = [pytest.mark.integration, pytest.mark.training]

ENDED = {"succeeded", "failed", "stopped"}


def test_a_gate_out_of_reach_stops_the_pipeline_short_with_its_reason(
    sf: Callable[..., Result], new_lab: Callable[..., Lab]
) -> None:
    lab = new_lab()
    experiments.new_experiment(lab, "g1", "trl/sft")
    prepare_experiment(lab.root, "g1")
    config = lab.root / "experiments" / "g1" / "config.yaml"
    config.write_text(config.read_text() + "eval:\n  gate: {metric: loss, max: 0.001}\n")
    commit_all(lab.root, "add g1 with a gate out of reach")

    got = sf("submit", "g1", "-p", "h200:1", "--model", "models/tiny-llama",
             "--train-data", "data/sft-train.jsonl", "--validation-data", "data/sft-val.jsonl",
             "-s", "max_steps=3", "--then", "export", "--then", "eval", "--json",
             cwd=lab.root)  # fmt: skip

    assert got.code == 0, got.err
    root = str(got.json()["run_id"])  # type: ignore[index]
    assert wait_for(sf, root, ENDED, timeout=600)["status"] == "succeeded"
    export_id = str(sf("job", "status", root, "--json").json()["steps"][0]["run_id"])  # type: ignore[index]
    assert wait_for(sf, export_id, ENDED, timeout=600)["status"] == "succeeded"
    eval_id = str(sf("job", "status", root, "--json").json()["steps"][1]["run_id"])  # type: ignore[index]
    done = wait_for(sf, eval_id, ENDED, timeout=600)

    assert done["status"] == "failed" and done["exit_code"] == 3
    report = json.loads((Path(str(done["run_dir"])) / "out" / "eval" / "report.json").read_text())
    assert report["metrics"]["loss"] > 0.001 and report["n"] > 0
    assert report["gate"]["passed"] is False
    assert report["gate"]["reason"].startswith("gate loss <= 0.001 failed: loss = ")
    log = sf("job", "logs", eval_id, "--no-follow").out
    assert "[gate] gate loss <= 0.001 failed" in log
    # The status names the gate, its bound and the value, not only "exit code 3".
    gate = done["gate"]
    assert isinstance(gate, dict) and gate["run_id"] == eval_id
    assert (gate["metric"], gate["bound"], gate["threshold"]) == ("loss", "max", 0.001)
    assert gate["passed"] is False and gate["value"] == report["metrics"]["loss"]
    assert str(done["reason"]).startswith("eval gate failed: loss = ")
    assert str(done["reason"]).endswith(", at most 0.001 required (exit code 3)")
    shown = sf("job", "status", eval_id)
    assert shown.code == 0 and "loss <= 0.001: failed, loss = " in shown.out
    training: Any = sf("job", "status", root, "--json").json()
    assert training["reason"].startswith(
        f"completed; pipeline stopped at step eval ({eval_id}), failed: eval gate failed: loss = "
    )
    assert training["gate"]["passed"] is False
    listed = sf("job", "ls", "--json").json()
    assert isinstance(listed, list) and listed[0]["run_id"] == root
    assert listed[0]["steps_done"] == "1/2!"


def test_sft_then_export_then_eval_ends_with_every_step_done_a_model_and_a_report(
    sf: Callable[..., Result], new_lab: Callable[..., Lab]
) -> None:
    lab = new_lab()
    experiments.new_experiment(lab, "e1", "trl/sft")
    prepare_experiment(lab.root, "e1")
    commit_all(lab.root, "add e1")

    got = sf("submit", "e1", "-p", "h200:1", "--model", "models/tiny-llama",
             "--train-data", "data/sft-train.jsonl", "--validation-data", "data/sft-val.jsonl",
             "-s", "max_steps=3", "--then", "export", "--then", "eval", "--json",
             cwd=lab.root)  # fmt: skip

    assert got.code == 0, got.err
    root = str(got.json()["run_id"])  # type: ignore[index]
    assert wait_for(sf, root, ENDED, timeout=600)["status"] == "succeeded"
    export_id = str(sf("job", "status", root, "--json").json()["steps"][0]["run_id"])  # type: ignore[index]
    exported = wait_for(sf, export_id, ENDED, timeout=600)
    assert exported["status"] == "succeeded", sf("job", "logs", export_id, "--no-follow").out
    eval_id = str(sf("job", "status", root, "--json").json()["steps"][1]["run_id"])  # type: ignore[index]
    done = wait_for(sf, eval_id, ENDED, timeout=600)
    assert done["status"] == "succeeded", sf("job", "logs", eval_id, "--no-follow").out

    listed = sf("job", "ls", "--json").json()
    assert isinstance(listed, list) and listed[0]["run_id"] == root
    assert listed[0]["steps_done"] == "2/2"  # training, then both steps: nothing stopped short
    assert "2/2 done" in sf("job", "status", root).out

    folder = Path(str(exported["run_dir"])) / "out" / "export"
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    ids = tokenizer("rev abc=", return_tensors="pt").input_ids
    assert model.generate(ids, max_new_tokens=4, do_sample=False).shape[1] > ids.shape[1]

    report = json.loads((Path(str(done["run_dir"])) / "out" / "eval" / "report.json").read_text())
    assert report["model"] == str(folder) and report["n"] > 0 and report["gate"] is None
    assert report["metrics"]["loss"] > 0 and report["metrics"]["perplexity"] > 1
    curves = sf("job", "metrics", eval_id, "--json").json()
    assert isinstance(curves, dict)
    assert {"eval/loss", "eval/perplexity"} <= set(curves["keys"])  # type: ignore[arg-type]
    [loss] = [s for s in curves["series"] if s["key"] == "eval/loss"]  # type: ignore[union-attr]
    assert loss["last_value"] == pytest.approx(report["metrics"]["loss"])
