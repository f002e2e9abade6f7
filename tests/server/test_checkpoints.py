"""The latest checkpoint: by numeric step, complete ones only, in every naming scheme."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from starforge.server.services.runs.checkpoints import all_checkpoints, latest


def hf(out: Path, step: int, *, complete: bool = True) -> Path:
    path = out / "checkpoints" / f"checkpoint-{step}"
    path.mkdir(parents=True)
    (path / "model.safetensors").write_bytes(b"w")
    if complete:
        (path / "trainer_state.json").write_text("{}")
    return path


def test_the_highest_step_wins_by_number_not_by_name(tmp_path: Path) -> None:
    for step in (9, 10, 100, 20):
        hf(tmp_path, step)
    found = latest(tmp_path)
    assert found is not None and (found.name, found.step) == ("checkpoint-100", 100)


def test_a_checkpoint_without_its_trainer_state_is_half_written_and_skipped(tmp_path: Path) -> None:
    hf(tmp_path, 5)
    hf(tmp_path, 10, complete=False)
    found = latest(tmp_path)
    assert found is not None and found.step == 5


def test_custom_step_files_and_verl_folders_are_checkpoints_too(tmp_path: Path) -> None:
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "step-7").write_text("step=7\n")
    (tmp_path / "checkpoints" / "step-8.tmp").write_text("half")  # a save in progress
    (tmp_path / "checkpoints" / "step-9").write_text("")  # empty: not a checkpoint
    verl = tmp_path / "ckpt" / "global_step_6"
    verl.mkdir(parents=True)
    (verl / "actor.pt").write_bytes(b"x")
    assert [(c.name, c.step) for c in all_checkpoints(tmp_path)] == [
        ("global_step_6", 6),
        ("step-7", 7),
    ]


def test_files_inside_a_checkpoint_and_other_outputs_are_not_checkpoints(tmp_path: Path) -> None:
    inner = hf(tmp_path, 3) / "step-999"
    inner.write_text("not a checkpoint of the run")
    (tmp_path / "final").mkdir()
    (tmp_path / "final" / "model.safetensors").write_bytes(b"m")
    found = latest(tmp_path)
    assert found is not None and found.step == 3


def test_no_output_folder_means_no_checkpoint(tmp_path: Path) -> None:
    assert latest(tmp_path / "missing") is None


def test_equal_steps_go_to_the_newest_on_disk(tmp_path: Path) -> None:
    old = hf(tmp_path, 4)
    new = tmp_path / "other" / "step-4"
    new.parent.mkdir()
    new.write_text("step=4\n")
    os.utime(old, (1, 1))
    found = latest(tmp_path)
    assert found is not None and found.path == new


@given(st.sets(st.integers(min_value=0, max_value=10**6), min_size=1, max_size=12))
def test_latest_is_the_numeric_maximum_of_any_set_of_steps(steps: set[int]) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        (out / "checkpoints").mkdir()
        for step in steps:
            (out / "checkpoints" / f"step-{step}").write_text(f"step={step}\n")
        found = latest(out)
        assert found is not None and found.step == max(steps)
