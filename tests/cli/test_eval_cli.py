"""``sf eval``: the exact command, offline (``--dry-run``), and its bad input."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from starforge.project.lab import Lab
from tests.conftest import Result


def test_dry_run_prints_the_eval_command_with_the_experiments_method_and_config(
    sf: Callable[..., Result], new_lab: Callable[..., Lab]
) -> None:
    lab = new_lab(experiments_={"g1": "trl/grpo"})
    (lab.root / "val.jsonl").write_text('{"prompt": "say a:"}\n')

    got = sf("eval", "g1", "--model", "org/tiny", "--data", "val.jsonl", "--dry-run", cwd=lab.root)

    assert got.code == 0, got.err
    report = lab.root / "eval" / "g1" / "report.json"
    command = [
        sys.executable, "-m", "starforge.steps.eval", "--model", "org/tiny",
        "--method", "trl/grpo", "--config", str(report.with_name("report.config.yaml")),
        "--data", str(lab.root / "val.jsonl"), "--out", str(report),
        "--exp-dir", str(lab.root / "experiments" / "g1"),
    ]  # fmt: skip
    assert " ".join(command) in " ".join(got.out.split())
    assert "nothing run (--dry-run)" in got.out
    assert not (lab.root / "eval").exists()  # offline and nothing written


def test_dry_run_with_a_run_names_its_export_folder_without_asking_the_server(
    sf: Callable[..., Result], new_lab: Callable[..., Lab]
) -> None:
    lab = new_lab(experiments_={"s1": "trl/sft"})
    (lab.root / "val.jsonl").write_text('{"prompt": "a", "completion": "b"}\n')

    got = sf("eval", "s1", "--model", "run/r-abc123", "--data", "val.jsonl", "--dry-run",
             cwd=lab.root)  # fmt: skip

    assert got.code == 0, got.err
    assert "--model <storage>/runs/<user>/lab/s1/r-abc123/out/export" in got.out


def test_a_method_without_a_platform_eval_is_refused(
    sf: Callable[..., Result], new_lab: Callable[..., Lab]
) -> None:
    lab = new_lab(experiments_={"c1": "custom/custom"})
    (lab.root / "val.jsonl").write_text("{}\n")
    got = sf("eval", "c1", "--model", "org/tiny", "--data", "val.jsonl", "--dry-run", cwd=lab.root)
    assert got.code == 2
    assert "method custom/custom has no platform eval" in got.err


def test_a_model_that_is_neither_a_folder_a_run_nor_a_hub_id_is_a_usage_error(
    sf: Callable[..., Result], new_lab: Callable[..., Lab], tmp_path: Path
) -> None:
    lab = new_lab(experiments_={"s1": "trl/sft"})
    (lab.root / "val.jsonl").write_text("{}\n")
    (tmp_path / "not-a-model").mkdir()

    missing = sf("eval", "s1", "--model", "./nope", "--data", "val.jsonl", cwd=lab.root)
    empty = sf("eval", "s1", "--model", str(tmp_path / "not-a-model"), "--data", "val.jsonl",
               cwd=lab.root)  # fmt: skip

    assert missing.code == 2 and "no such folder, and not a run/RUN_ID or a hub id" in missing.err
    assert empty.code == 2 and "not a Hugging Face model folder (no config.json)" in empty.err
