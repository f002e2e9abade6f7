"""``sf export``: the --checkpoint grammar and the offline --dry-run of the export's command."""

from __future__ import annotations

from collections.abc import Callable

from starforge.project.lab import Lab
from tests.conftest import Result


def test_export_dry_run_prints_the_exact_export_command_offline(
    sf: Callable[..., Result], new_lab: Callable[..., Lab]
) -> None:
    lab = new_lab(experiments_={"s1": "trl/sft"})
    got = sf("export", "s1", "--checkpoint", "run/r-abcdef0123@step=40", "--dry-run", cwd=lab.root)
    assert got.code == 0, got.err
    runs = f"<storage>/runs/<user>/{lab.name}/s1"
    assert got.out.splitlines()[0] == (
        "python -m starforge.steps.export --framework trl "
        f"--checkpoints {runs}/r-abcdef0123/out/checkpoints "
        f"--out {runs}/r-dryrun0000/out/export "
        f"--card {runs}/r-dryrun0000/state/attempt-1.export-card.json "
        "--format huggingface --step 40"
    )


def test_a_verl_export_dry_run_runs_the_export_program_for_verl(
    sf: Callable[..., Result], new_lab: Callable[..., Lab]
) -> None:
    lab = new_lab(experiments_={"v1": "verl/grpo"})
    got = sf("export", "v1", "--checkpoint", "run/r-abcdef0123", "--dry-run", cwd=lab.root)
    assert got.code == 0, got.err
    assert "--framework verl" in got.out and "--step" not in got.out


def test_a_checkpoint_not_written_as_run_slash_id_is_a_usage_error(
    sf: Callable[..., Result], new_lab: Callable[..., Lab]
) -> None:
    lab = new_lab(experiments_={"s1": "trl/sft"})
    got = sf("export", "s1", "--checkpoint", "r-abc:40", "--dry-run", cwd=lab.root)
    assert got.code == 2
    assert "run/RUN_ID[@step=N]" in got.err


def test_an_experiment_whose_method_declares_no_export_is_refused(
    sf: Callable[..., Result], new_lab: Callable[..., Lab]
) -> None:
    lab = new_lab(experiments_={"c1": "custom/custom"})
    got = sf("export", "c1", "--checkpoint", "run/r-abcdef0123", "--dry-run", cwd=lab.root)
    assert got.code == 2
    assert "declares no export" in got.err
