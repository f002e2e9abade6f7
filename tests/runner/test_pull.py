"""The runner's pull of a run's image (runner/pull.py), the parts that need no podman: its command
line never holds a credential, and the auth file is the runner's alone while it exists."""

from __future__ import annotations

import base64
import json
import stat
from pathlib import Path

from starforge.contract.registries import RunRegistryAuth
from starforge.runner.pull import pull_argv, write_auth_file

AUTH = RunRegistryAuth(registry="nvcr.io", username="$oauthtoken", password="nvapi-0123456789")


def test_the_pull_command_line_names_the_auth_file_never_the_credentials() -> None:
    argv = pull_argv("nvcr.io/nvidia/pytorch@sha256:" + "a" * 64, tls_verify=True,
                     authfile="/srv/run/state/attempt-1.node-0.auth.json")  # fmt: skip
    assert argv == [
        "podman", "pull", "--quiet", "--authfile", "/srv/run/state/attempt-1.node-0.auth.json",
        "nvcr.io/nvidia/pytorch@sha256:" + "a" * 64,
    ]  # fmt: skip
    assert not any(AUTH.password in a or AUTH.username in a for a in argv)


def test_a_registry_spoken_to_over_plain_http_is_pulled_without_tls_verification() -> None:
    argv = pull_argv("127.0.0.1:5000/lab/tiny@sha256:" + "b" * 64, tls_verify=False)
    assert argv == ["podman", "pull", "--quiet", "--tls-verify=false",
                    "127.0.0.1:5000/lab/tiny@sha256:" + "b" * 64]  # fmt: skip


def test_the_auth_file_is_0600_from_its_creation_and_replaces_a_leftover(tmp_path: Path) -> None:
    path = tmp_path / "state" / "attempt-1.node-0.auth.json"
    path.parent.mkdir()
    path.write_text("left by a runner killed mid-pull")
    path.chmod(0o644)
    write_auth_file(path, AUTH)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    auths = json.loads(path.read_text())["auths"]
    assert list(auths) == ["nvcr.io"]
    assert base64.b64decode(auths["nvcr.io"]["auth"]).decode() == "$oauthtoken:nvapi-0123456789"
