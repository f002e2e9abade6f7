"""The local executor starts the runner of a trl job on the host from its warm trainer, under
the environment the job will have, and every other runner from the plain warm runner."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from starforge.contract.env import make_binding
from starforge.contract.profiles import Pool
from starforge.server.executors.local import LocalExecutor

from .factories import eventually

TARGET = "tests.server.trainer_target"


@pytest.fixture(autouse=True)
def light_stack(monkeypatch: pytest.MonkeyPatch) -> None:
    # The warm trainer imports json in place of torch and trl: the same path, in milliseconds.
    monkeypatch.setenv("STARFORGE_WARM_TRAINER_PRELOAD", "json")


class Starts:
    """Runners started through ``executor``, each ended (and the warm processes) by close."""

    def __init__(self, executor: LocalExecutor) -> None:
        self.executor = executor
        self.refs: list[str] = []

    def start(self, tmp_path: Path, name: str, **binding: Any) -> dict[str, Any]:
        """Start a runner for a binding with ``binding``'s fields; the first line it printed."""
        folder = tmp_path / name
        folder.mkdir()
        pool = Pool(name="all", profile="h200:1", series="h200", nodes=1, gpus_per_node=1)
        fields: dict[str, Any] = {
            "run_id": f"r-{name}",
            "attempt": 1,
            "user": "alice",
            "storage_root": str(tmp_path / "storage"),
            "run_dir": str(folder),
            "log_path": str(folder / "node-0.log"),
            "pools": [pool],
            "pool": "all",
            "node_rank": 0,
            "nnodes": 1,
            "visible_devices": [0],
            "master_port": 29500,
            "endpoint": "http://127.0.0.1:1",
            "run_token": "t",
            "hf_offline": True,
            **binding,
        }
        path = folder / "binding.json"
        path.write_text(make_binding(**fields).model_dump_json())
        log = Path(fields["log_path"])
        self.refs.append(self.executor.start(path, log))
        eventually(lambda: log.exists() and "\n" in log.read_text(), what="the first line")
        return dict(json.loads(log.read_text().splitlines()[0]))

    def close(self) -> None:
        for ref in self.refs:
            self.executor.kill(ref)
        self.executor.close()


@pytest.fixture
def local() -> Iterator[Starts]:
    starts = Starts(LocalExecutor([sys.executable, "-m", TARGET]))
    yield starts
    starts.close()


def test_a_trl_runner_is_forked_by_the_warm_trainer_under_its_jobs_environment(
    local: Starts, tmp_path: Path
) -> None:
    seen = local.start(tmp_path, "sft", framework="trl")
    assert "--trainer" in seen["forked_by"] and seen["imported"] is True
    # Imported under the HF_HOME its jobs get, not the server's.
    assert seen["hf_home"] == f"{tmp_path / 'storage'}/cache/hf"


def test_runners_of_other_jobs_come_from_the_plain_warm_runner(
    local: Starts, tmp_path: Path
) -> None:
    custom = local.start(tmp_path, "custom", framework="custom")
    in_image = local.start(
        tmp_path,
        "image",
        framework="trl",
        image="reg/x@sha256:" + "0" * 64,
        containers="podman",
    )
    as_nobody = local.start(tmp_path, "nobody", framework="trl", job_user="nobody")
    for seen in (custom, in_image, as_nobody):
        assert "--trainer" not in seen["forked_by"] and seen["imported"] is False


def test_a_run_of_another_storage_root_gets_a_warm_trainer_of_its_own(
    local: Starts, tmp_path: Path
) -> None:
    first = local.start(tmp_path, "first", framework="trl")
    other = local.start(
        tmp_path, "other", framework="trl", storage_root=str(tmp_path / "elsewhere")
    )
    assert first["hf_home"] == f"{tmp_path / 'storage'}/cache/hf"
    assert other["hf_home"] == f"{tmp_path / 'elsewhere'}/cache/hf"


def test_with_the_warm_trainer_off_a_trl_runner_comes_from_the_plain_one(
    tmp_path: Path,
) -> None:
    starts = Starts(LocalExecutor([sys.executable, "-m", TARGET], warm_trainer=False))
    try:
        seen = starts.start(tmp_path, "sft", framework="trl")
        assert "--trainer" not in seen["forked_by"] and seen["imported"] is False
    finally:
        starts.close()
