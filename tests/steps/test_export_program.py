"""The export program's pure parts: which checkpoint it exports, and the model card it writes."""

from __future__ import annotations

from pathlib import Path

from starforge.steps.export import find_checkpoint, main, model_card


def checkpoint(root: Path, name: str, *, complete: bool = True) -> Path:
    path = root / name
    path.mkdir(parents=True)
    if complete:
        (path / "trainer_state.json").write_text("{}")
    return path


def test_the_highest_complete_checkpoint_is_exported_never_a_partial_one(tmp_path: Path) -> None:
    checkpoint(tmp_path, "checkpoint-20")
    best = checkpoint(tmp_path, "checkpoint-100")
    checkpoint(tmp_path, "checkpoint-200", complete=False)
    assert find_checkpoint(tmp_path) == best
    assert find_checkpoint(tmp_path, 20) == tmp_path / "checkpoint-20"
    assert find_checkpoint(tmp_path, 200) is None


def test_an_export_with_no_checkpoint_exits_2_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "export"
    code = main(["--checkpoints", str(tmp_path / "none"), "--out", str(out)])
    assert code == 2
    assert not out.exists()


def test_the_model_card_records_run_commit_method_data_digests_and_final_metrics() -> None:
    card = model_card(
        {
            "run_id": "r-abc",
            "git_commit": "c" * 40,
            "method": "trl/sft",
            "method_version": "1.16.0",
            "base_model": "org/tiny",
            "hyperparams": {"learning_rate": 0.01},
            "data": [
                {"name": "train_data", "kind": "package", "value": "d.jsonl", "sha256": "f" * 64}
            ],
            "metrics": {"loss": 0.25},
        },
        Path("checkpoint-2"),
    )
    assert "run: `r-abc`" in card
    assert "c" * 40 in card
    assert "`trl/sft` version `1.16.0`" in card
    assert "sha256 `" + "f" * 64 + "`" in card
    assert "| `learning_rate` | `0.01` |" in card
    assert "| `loss` | `0.25` |" in card
    assert "checkpoint `checkpoint-2`" in card
