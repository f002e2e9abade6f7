"""``--output-dataset`` with a real server and runner: a job writes into
``$FORGE_DATASET_OUT_DIR``, the succeeded run publishes it, and the next run reads it by name."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from starforge.cli.main import main
from starforge.client import config
from starforge.project.lab import Lab
from tests.conftest import Result, commit_all
from tests.integration.conftest import wait_for

pytestmark = pytest.mark.integration
IMAGE = "registry.example/train:v1"


def test_a_runs_output_dataset_is_published_and_read_by_the_next_run(
    sf: Callable[..., Result], custom_lab: Callable[..., Lab]
) -> None:
    lab = custom_lab(steps=1)
    script = lab.root / "experiments" / "c1" / "train.sh"
    script.write_text(
        script.read_text().replace(
            "\n",
            '\nif [ -n "${FORGE_DATASET_OUT_DIR:-}" ]; then echo \'{"prompt": "made"}\' '
            '> "$FORGE_DATASET_OUT_DIR/made.jsonl"; fi\n'
            'if [ -n "${MADE_DATA_DIR:-}" ]; then echo "read: $(cat "$FORGE_TRAIN_DATA")"; fi\n',
            1,
        )
    )
    commit_all(lab.root, "c1 writes and reads a dataset")
    owner = sf("whoami", "--json").json()["user"]  # type: ignore[index]
    base = ["submit", "c1", "--profile", "h200:1", "--image", IMAGE, "--json"]
    first = sf(*base, "--output-dataset", f"{owner}/made@v1", cwd=lab.root).json()
    assert isinstance(first, dict)
    assert wait_for(sf, str(first["run_id"]), {"succeeded", "failed"})["status"] == "succeeded"

    deadline = time.monotonic() + 60  # published in the background once the run succeeded
    while sf("dataset", "ls", f"{owner}/made", "--json").json() == []:
        assert time.monotonic() < deadline, "the output dataset was never published"
        time.sleep(0.2)
    shown = sf("dataset", "show", f"{owner}/made@v1", "--json").json()
    assert [f["path"] for f in shown["files"]] == ["made.jsonl"]  # type: ignore[index]

    again = sf(*base, "--output-dataset", f"{owner}/made@v1", cwd=lab.root)
    assert again.code == 2 and "that version exists" in again.err

    reader = sf(
        *base[:-1], "--train-dataset", f"{owner}/made", "--train-data", "made.jsonl",
        "--follow", cwd=lab.root,
    )  # fmt: skip
    assert reader.code == 0, reader.err + reader.out[-2000:]
    assert 'read: {"prompt": "made"}' in reader.out


def test_an_output_dataset_is_published_whole_and_once_after_a_kill_9_at_success(
    sf: Callable[..., Result], custom_lab: Callable[..., Lab], server_home: Path
) -> None:
    """The publication is a reaction the success owes in its own transaction: a server killed
    the moment the run says succeeded (hashing its files, or not yet started) publishes the
    version once it is back, whole, and only once."""
    files = 5000
    lab = custom_lab(steps=1)
    script = lab.root / "experiments" / "c1" / "train.sh"
    script.write_text(
        script.read_text().replace(
            "\n",
            f'\nfor i in $(seq 1 {files}); do echo "{{\\"i\\": $i}}" '
            '> "$FORGE_DATASET_OUT_DIR/part-$i.jsonl"; done\n',
            1,
        )
    )
    commit_all(lab.root, "c1 writes many small files")
    owner = sf("whoami", "--json").json()["user"]  # type: ignore[index]
    got = sf(
        "submit", "c1", "--profile", "h200:1", "--image", IMAGE, "--json",
        "--output-dataset", f"{owner}/many@v1", cwd=lab.root,
    )  # fmt: skip
    assert got.code == 0, got.err
    run_id = str(got.json()["run_id"])  # type: ignore[index, call-overload]
    assert wait_for(sf, run_id, {"succeeded", "failed"}, timeout=300)["status"] == "succeeded"
    info = config.read_server_file(server_home)
    assert info is not None
    os.kill(int(str(info["pid"])), signal.SIGKILL)  # at once: the publication has barely begun
    assert main(["server", "start"]) == 0

    deadline = time.monotonic() + 300
    while sf("dataset", "ls", f"{owner}/many", "--json").json() == []:
        assert time.monotonic() < deadline, "the output dataset was never published"
        time.sleep(0.2)
    listed = sf("dataset", "ls", f"{owner}/many", "--json").json()
    assert isinstance(listed, list) and len(listed) == 1  # once
    shown = sf("dataset", "show", f"{owner}/many@v1", "--json").json()
    assert isinstance(shown, dict)
    assert len(shown["files"]) == files  # whole
    assert {f["path"] for f in shown["files"]} == {f"part-{i}.jsonl" for i in range(1, files + 1)}
