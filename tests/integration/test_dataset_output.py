"""``--output-dataset`` with a real server and runner: a job writes into
``$FORGE_DATASET_OUT_DIR``, the succeeded run publishes it, and the next run reads it by name."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

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
