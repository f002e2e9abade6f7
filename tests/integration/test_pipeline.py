"""A pipeline end to end: tiny trl/sft with ``--then export`` ends with its export step done and a
Hugging Face folder that ``transformers`` loads and generates with; ``kill -9`` of the control
plane during the export step: the step finishes, once."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from starforge.cli.main import main
from starforge.client import config
from starforge.project import experiments
from starforge.project.lab import Lab
from tests.conftest import Result, commit_all
from tests.integration.conftest import wait_for
from tests.tiny_inputs import prepare_experiment

pytestmark = [pytest.mark.integration, pytest.mark.training]


ENDED = {"succeeded", "failed", "stopped"}
FLAGS = ["--profile", "h200:1", "--model", "models/tiny-llama", "-s", "max_steps=6"]
FLAGS += ["--train-data", "data/sft-train.jsonl", "--validation-data", "data/sft-val.jsonl"]


def sft_lab(new_lab: Callable[..., Lab]) -> Lab:
    lab = new_lab()
    experiments.new_experiment(lab, "p1", "trl/sft")
    prepare_experiment(lab.root, "p1")
    commit_all(lab.root, "add p1")
    return lab


def test_sft_then_export_ends_with_its_step_done_and_a_loadable_model(
    sf: Callable[..., Result],
    new_lab: Callable[..., Lab],
) -> None:
    lab = sft_lab(new_lab)
    flags = FLAGS
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


def test_kill_9_of_the_server_during_the_export_step_finishes_the_step_once(
    sf: Callable[..., Result], new_lab: Callable[..., Lab], server_home: Path
) -> None:
    lab = sft_lab(new_lab)
    got = sf("submit", "p1", *FLAGS, "--then", "export", "--json", cwd=lab.root)
    assert got.code == 0, got.err
    root = str(got.json()["run_id"])  # type: ignore[index]
    assert wait_for(sf, root, ENDED, timeout=600)["status"] == "succeeded"
    step_id = str(sf("job", "status", root, "--json").json()["steps"][0]["run_id"])  # type: ignore[index]
    view = wait_for(sf, step_id, {"running", *ENDED}, timeout=300)
    log = Path(str(view["attempts"][0]["log_path"]))  # type: ignore[index]
    deadline = time.monotonic() + 300
    while "export: " not in (log.read_text() if log.is_file() else ""):
        assert time.monotonic() < deadline, "the export program never started"
        time.sleep(0.1)
    info = config.read_server_file(server_home)
    assert info is not None
    os.kill(int(str(info["pid"])), signal.SIGKILL)  # while the export converts
    assert main(["server", "start"]) == 0

    done = wait_for(sf, step_id, ENDED, timeout=300)
    assert done["status"] == "succeeded", log.read_text()[-3000:]
    assert len(done["attempts"]) == 1  # started once
    steps = [
        r
        for r in sf("job", "ls", "--steps", "--json").json()  # type: ignore[union-attr]
        if (r.get("step") or {}).get("root_run_id") == root
    ]
    assert [r["run_id"] for r in steps] == [step_id]  # made once
    assert (Path(str(done["run_dir"])) / "out" / "export" / "model.safetensors").is_file()
    assert sf("job", "ls", "--json").json()[0]["steps_done"] == "1/1"  # type: ignore[index]
    again = sf("job", "retry", root)  # acts on the pipeline's current step, never retrains
    assert again.code == 0 and f"run {step_id} already succeeded" in again.out


def test_a_dry_run_with_then_shows_the_command_of_each_step(
    sf: Callable[..., Result], new_lab: Callable[..., Lab]
) -> None:
    lab = sft_lab(new_lab)
    then = ["--then", "export", "--then", "eval"]
    got = sf("submit", "p1", *FLAGS, *then, "--dry-run", cwd=lab.root)
    assert got.code == 0, got.err
    runs = f"<storage>/runs/<user>/{lab.name}/p1"
    assert f"python -m starforge.steps.export --framework trl --checkpoints {runs}/<run>/out/" in (
        got.out
    )
    assert f"python -m starforge.steps.eval --model {runs}/<export run>/out/export" in got.out
    assert "nothing submitted" in got.out
