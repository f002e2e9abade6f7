"""A pipeline end to end: tiny trl/sft with ``--then export`` ends with its export step done and a
Hugging Face folder that ``transformers`` loads and generates with."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from starforge.project import experiments
from starforge.project.lab import Lab
from tests.conftest import Result, commit_all
from tests.integration.conftest import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.training]


def test_sft_then_export_ends_with_its_step_done_and_a_loadable_model(
    sf: Callable[..., Result],
    new_lab: Callable[..., Lab],
) -> None:
    lab = new_lab()
    experiments.new_experiment(lab, "p1", "trl/sft")
    subprocess.run(
        [sys.executable, "experiments/p1/prepare.py"], cwd=lab.root, check=True, capture_output=True
    )
    commit_all(lab.root, "add p1")
    flags = ["--profile", "h200:1", "--model", "models/tiny-llama"]
    flags += ["--train-data", "data/sft-train.jsonl", "--validation-data", "data/sft-val.jsonl"]
    refused = sf("submit", "p1", *flags, "--then", "eval", cwd=lab.root)
    assert refused.code == 2
    assert "--then eval needs --then export before it" in refused.err
    got = sf(
        "submit", "p1", *flags, "-s", "max_steps=6", "--then", "export", "--json", cwd=lab.root
    )
    assert got.code == 0, got.err
    root = str(got.json()["run_id"])  # type: ignore[index]
    view = wait_for(sf, root, {"succeeded", "failed", "stopped"}, timeout=600)
    assert view["status"] == "succeeded", view["reason"]
    [step] = view["steps"]  # type: ignore[misc]
    done = wait_for(sf, step["run_id"], {"succeeded", "failed", "stopped"}, timeout=600)
    assert done["status"] == "succeeded", sf("job", "logs", step["run_id"], "--no-follow").out

    listed = sf("job", "ls", "--json").json()
    assert isinstance(listed, list)
    assert [r["run_id"] for r in listed][:1] == [root]  # the step run is not a row of its own
    assert listed[0]["steps_done"] == "1/1"
    assert any(r["run_id"] == step["run_id"] for r in sf("job", "ls", "--steps", "--json").json())  # type: ignore[union-attr]
    status = sf("job", "status", root)
    assert "1/1 done" in status.out and f"sf job logs {step['run_id']}" in status.out

    folder = Path(str(done["run_dir"])) / "out" / "export"
    names = {p.name for p in folder.iterdir()}
    assert {"model.safetensors", "config.json", "generation_config.json", "README.md"} <= names
    assert root in (folder / "README.md").read_text()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    ids = tokenizer("rev abc=", return_tensors="pt").input_ids
    out = model.generate(ids, max_new_tokens=4, do_sample=False)
    assert out.shape[1] > ids.shape[1]
