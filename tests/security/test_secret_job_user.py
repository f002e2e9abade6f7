"""A secret given ``as: file`` to a job of a root server (jobs as ``nobody``) is a 0600 file of the
job's user, and the job's own token cannot fetch the run's secrets (only its runner's can)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import pytest

from starforge.project import experiments
from starforge.project.lab import Lab
from tests.conftest import Result, commit_all
from tests.integration.conftest import wait_for

from .test_job_isolation import IMAGE, as_root, open_root, probes, root_server

__all__ = ["open_root", "root_server"]  # fixtures this module uses
PEM = "-----BEGIN KEY-----\njob-user-secret-3e5f\n-----END KEY-----\n"
PROBE = """#!/usr/bin/env bash
set -u
echo "probe: user=$(id -un)"
echo "probe: file=$(stat -c '%U %a' "$KEY_PEM_FILE")"
echo "probe: sha=$(sha256sum < "$KEY_PEM_FILE" | cut -d' ' -f1)"
url="$STARFORGE_ENDPOINT/api/v1/runs/$STARFORGE_RUN_ID/secrets"
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST \\
    -H "X-StarForge-Run-Token: $STARFORGE_TOKEN" \\
    -H "Content-Type: application/json" --data '{"attempt": 1}' "$url")
echo "probe: fetch=$code"
"""


@pytest.mark.integration
@as_root
def test_a_file_secret_is_the_job_users_alone_and_the_job_token_fetches_nothing(
    root_server: Path,
    sf: Callable[..., Result],
    new_lab: Callable[..., Lab],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("STARFORGE_HOME", str(root_server))
    pem = tmp_path / "key.pem"
    pem.write_text(PEM)
    assert sf("secret", "set", "KEY_PEM", "--from-file", str(pem)).code == 0
    lab = new_lab("secret-probe")
    experiments.new_experiment(lab, "probe", "custom/custom")
    folder = lab.root / "experiments" / "probe"
    (folder / "train.sh").write_text(PROBE)
    (folder / "config.yaml").write_text(
        "starforge:\n  observability: platform\nsecrets:\n  - {name: KEY_PEM, as: file}\n"
    )
    commit_all(lab.root, "probe")
    got = sf("submit", "probe", "--profile", "h200:1", "--image", IMAGE, "--json", cwd=lab.root)
    assert got.code == 0, got.err
    run_id = str(got.json()["run_id"])  # type: ignore[index]
    view = wait_for(sf, run_id, {"succeeded", "failed"})
    log = sf("job", "logs", run_id, "-n", "0", "--no-follow").out
    assert view["status"] == "succeeded", log
    assert probes(log) == {
        "user": "nobody",
        "file": "nobody 600",
        "sha": hashlib.sha256(PEM.encode()).hexdigest(),
        "fetch": "403",
    }, log
    assert "job-user-secret-3e5f" not in log
