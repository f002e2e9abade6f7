"""The export program with verl's and NeMo-RL's converters: stand-ins on PATH that behave as the
real ones do at the edges that matter (NeMo-RL's refuses an existing target; both create it),
so what runs is our program, its checkpoint search and the commands it compiles."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from starforge.steps.export import main

# uv run python convert_dcp_to_hf.py --config=... --dcp-ckpt-path=... --hf-ckpt-path=TARGET:
# like nemo_rl.utils.native_checkpoint.convert_dcp_to_hf, FileExistsError on an existing TARGET.
UV_STUB = """#!/bin/sh
echo "cwd=$PWD $*" >> "$LOG"
for arg in "$@"; do case "$arg" in --hf-ckpt-path=*) target="${arg#--hf-ckpt-path=}" ;; esac; done
if [ -e "$target" ]; then echo "FileExistsError: $target already exists" >&2; exit 1; fi
mkdir -p "$target" && echo '{}' > "$target/config.json"
"""
# python -m verl.model_merger merge ... --local_dir DIR --target_dir TARGET: needs DIR's shards.
PYTHON_STUB = """#!/bin/sh
echo "$*" >> "$LOG"
while [ $# -gt 0 ]; do
  case "$1" in --local_dir) local="$2"; shift ;; --target_dir) target="$2"; shift ;; esac; shift
done
[ -f "$local/model_world_size_1_rank_0.pt" ] || { echo "no shards in $local" >&2; exit 1; }
mkdir -p "$target" && echo '{}' > "$target/config.json"
"""


@pytest.fixture
def converters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "uv").write_text(UV_STUB)
    (bin_dir / "python").write_text(PYTHON_STUB)
    for stub in bin_dir.iterdir():
        stub.chmod(0o755)
    (tmp_path / "nemo-rl").mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("LOG", str(tmp_path / "calls.log"))
    monkeypatch.setenv("NEMO_RL_DIR", str(tmp_path / "nemo-rl"))
    return tmp_path / "calls.log"


def export(tmp_path: Path, framework: str, *extra: str) -> int:
    card = tmp_path / "card.json"
    card.write_text(json.dumps({"run_id": "r-1", "method": f"{framework}/x"}))
    args = ["--framework", framework, "--checkpoints", str(tmp_path / "checkpoints")]
    return main([*args, "--out", str(tmp_path / "export"), "--card", str(card), *extra])


def test_a_nemo_rl_export_hands_the_converter_a_folder_that_does_not_exist_yet(
    tmp_path: Path, converters: Path
) -> None:
    (tmp_path / "checkpoints" / "step_20" / "policy" / "weights").mkdir(parents=True)

    assert export(tmp_path, "nemo-rl") == 0

    assert (tmp_path / "export" / "config.json").is_file()
    assert (tmp_path / "export" / "README.md").is_file()
    assert not (tmp_path / "export.partial").exists()
    call = converters.read_text()
    assert call.startswith(f"cwd={tmp_path}/nemo-rl run python {tmp_path}/nemo-rl/examples/")
    assert f"--hf-ckpt-path={tmp_path}/export.partial" in call


def test_a_second_nemo_rl_export_replaces_the_first(tmp_path: Path, converters: Path) -> None:
    (tmp_path / "checkpoints" / "step_20" / "policy" / "weights").mkdir(parents=True)
    assert export(tmp_path, "nemo-rl") == 0

    assert export(tmp_path, "nemo-rl") == 0
    assert (tmp_path / "export" / "README.md").is_file()


def test_a_verl_sft_checkpoint_is_merged_from_the_step_folder_itself(
    tmp_path: Path, converters: Path
) -> None:
    step = tmp_path / "checkpoints" / "global_step_8"
    step.mkdir(parents=True)
    (step / "model_world_size_1_rank_0.pt").write_text("")  # verl's SFT engine: no actor/

    assert export(tmp_path, "verl") == 0
    assert f"--local_dir {step} --target_dir" in converters.read_text()


def test_a_verl_ppo_checkpoint_is_merged_from_its_actor_folder(
    tmp_path: Path, converters: Path
) -> None:
    actor = tmp_path / "checkpoints" / "global_step_8" / "actor"
    actor.mkdir(parents=True)
    (actor / "model_world_size_1_rank_0.pt").write_text("")

    assert export(tmp_path, "verl", "--subdir", "actor") == 0
    assert (tmp_path / "export" / "config.json").is_file()


def test_a_failing_converter_fails_the_export_and_leaves_no_folder(
    tmp_path: Path, converters: Path
) -> None:
    (tmp_path / "checkpoints" / "global_step_8").mkdir(parents=True)  # no shards

    assert export(tmp_path, "verl") == 1
    assert not (tmp_path / "export").exists()
