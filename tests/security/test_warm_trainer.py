"""The warm trainer runs as the server's user (root on a lab's server) and has the training
stack imported: a job that is to run as another user must never be forked from it, or it would
run as root. The executor sends such a runner to the plain warm runner, and a runner that has a
standby all the same starts the job fresh, as its user."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest

from starforge.server.executors.local import LocalExecutor
from tests.server.test_warm_trainer import Starts

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(os.geteuid() != 0, reason="only root switches a job to another user")
def test_a_job_for_another_user_is_never_forked_from_the_root_warm_trainer(
    tmp_path: Path,
) -> None:
    log = tmp_path / "attempt-1.log"
    done = subprocess.run(
        [sys.executable, "-m", "tests.security.warm_trainer_driver", str(log)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    answer = json.loads(done.stdout.splitlines()[-1])
    assert answer["forked"] is False
    if "refused" in answer:  # this machine's interpreter is not nobody's to run: it tried as nobody
        assert answer["refused"] == "Permission denied"
    else:
        assert answer["code"] == 0
        assert f"uid {pwd.getpwnam('nobody').pw_uid}" in log.read_text()


def test_the_warm_trainer_holds_none_of_the_servers_settings_a_forked_job_could_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What a job forked from the warm trainer finds in /proc/self/environ is what the warm
    # trainer was started with: a fresh job's environment never has the server's settings.
    monkeypatch.setenv("STARFORGE_DATABASE_URL", "postgresql://forge:hunter2@db.lab/forge")
    monkeypatch.setenv("STARFORGE_WARM_TRAINER_PRELOAD", "json")
    starts = Starts(LocalExecutor([sys.executable, "-m", "tests.server.trainer_target"]))
    try:
        seen = starts.start(tmp_path, "sft", framework="trl")
        assert seen["imported"] is True
        assert "STARFORGE_DATABASE_URL" not in seen["exec_env"]
        assert "HF_HOME" in seen["exec_env"]  # what its jobs are imported under
    finally:
        starts.close()
