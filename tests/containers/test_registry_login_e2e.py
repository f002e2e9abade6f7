"""``sf submit --image`` of a tag on a registry that answers every anonymous request with a Bearer
challenge (as Docker Hub, ghcr.io and nvcr.io do), through the real server with ``containers:
podman``: the tag resolves to its digest at admission, the runner pulls the image and the job runs
inside it. Where the token service demands credentials, the submission is refused naming
``sf admin registry login HOST`` until an admin stores a login; then admission and the runner's
pull use it, and the password is nowhere in the run's log, folders or podman's command line.

The registry is the project's docker-registry with ``auth: token`` in front of a real token
service (tests/containers/token_registry.py); the image is the suite's busybox, pushed with
podman. Without podman or docker-registry the tests skip, except under ``CI=true``.
"""

from __future__ import annotations

import io
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from starforge.project.lab import Lab
from tests.conftest import Result
from tests.containers.conftest import containers_named, make_image
from tests.containers.token_registry import TokenRegistry, token_registry
from tests.integration.conftest import wait_for
from tests.security.test_job_isolation import as_root, open_root
from tests.security.test_run_identities import job_lab, lab_server

__all__ = ["open_root"]  # a fixture this module uses

pytestmark = [pytest.mark.containers, pytest.mark.integration, pytest.mark.usefixtures("podman")]

PUSHER = ("pusher", "pusher-password-0c1d")
READER = ("reader", "reader-password-9e8f7a")
SCRIPT = """#!/usr/bin/env bash
echo "marker: $(head -n 1 /etc/sf-marker)"
"""


@pytest.fixture
def podman_server(open_root: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("STARFORGE_CONTAINERS", "podman")  # the suite's default is none
    with lab_server(open_root, monkeypatch, containers="podman") as home:
        yield home


@pytest.fixture
def reg(tmp_path: Path) -> Iterator[TokenRegistry]:
    with token_registry(tmp_path / "registry") as made:
        made.service.users = dict([PUSHER, READER])
        yield made


@pytest.fixture
def made_images() -> Iterator[list[str]]:
    """Images a test made: removed at its end with every name they got (a pull by digest finds
    an image of the same digest under any name, so none may outlive its test)."""
    made: list[str] = []
    yield made
    for ref in made:
        subprocess.run(["podman", "rmi", "-f", ref], capture_output=True)


def push_image(reg: TokenRegistry, marker: str, made: list[str]) -> tuple[str, str]:
    """A busybox image of its own (``marker`` and a fresh nonce in it) pushed as ``lab/tiny:1``
    (podman logs in to the token service as the pusher), then untagged here so the run's runner
    has to pull it; (tag, digest)."""
    local = make_image({"etc/sf-marker": f"{marker}\n{uuid.uuid4().hex}\n".encode()})
    made.append(local)
    remote = f"{reg.address}/lab/tiny:1"
    subprocess.run(["podman", "tag", local, remote], check=True, capture_output=True)
    with tempfile.NamedTemporaryFile() as digest_file:
        subprocess.run(
            ["podman", "push", "--tls-verify=false", "--creds", ":".join(PUSHER),
             "--digestfile", digest_file.name, remote],
            check=True, capture_output=True,
        )  # fmt: skip
        digest = Path(digest_file.name).read_text().strip()
    subprocess.run(["podman", "rmi", remote], check=True, capture_output=True)
    made.append(f"{remote[:-2]}@{digest}")  # what the runner pulls
    assert subprocess.run(["podman", "image", "exists", f"{remote[:-2]}@{digest}"]).returncode
    return remote, digest


def submit(sf: Callable[..., Result], lab: Lab, image: str) -> Result:
    return sf("submit", "tiny", "--profile", "h200:1", "--image", image, "--json", cwd=lab.root)


def finished(sf: Callable[..., Result], run_id: str) -> tuple[str, str]:
    view = wait_for(sf, run_id, {"succeeded", "failed", "stopped"})
    log = sf("job", "logs", run_id, "-n", "0", "--no-follow").out
    return str(view["status"]), log


def files_under(folder: Path) -> Iterator[Path]:
    return (p for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


@as_root
def test_a_tag_behind_a_bearer_challenge_resolves_pulls_and_runs_in_its_image(
    podman_server: Path,
    reg: TokenRegistry,
    made_images: list[str],
    sf: Callable[..., Result],
    new_lab: Callable[..., Lab],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("STARFORGE_HOME", str(podman_server))  # `sf` set a home of its own
    tag, digest = push_image(reg, "public-tiny", made_images)
    lab = job_lab(new_lab, "tiny", SCRIPT, {})
    got = submit(sf, lab, tag)
    assert got.code == 0, got.err
    answer = got.json()
    run_id = str(answer["run_id"])  # type: ignore[index, call-overload]
    pinned = f"{reg.address}/lab/tiny@{digest}"
    assert any(digest in w for w in answer["warnings"])  # type: ignore[index, union-attr]
    status, log = finished(sf, run_id)
    assert status == "succeeded", log
    assert f"pulling the image {pinned}\n" in log  # anonymously: no login is stored
    assert "marker: public-tiny" in log  # the job ran inside the pulled image
    # Admission and the runner's pull both took an anonymous token for the repository.
    assert reg.service.pulled_by("") >= 2
    assert containers_named(f"sf-{run_id}-1-0") == []


@as_root
def test_a_registry_that_demands_credentials_works_once_an_admin_stores_a_login(
    podman_server: Path,
    open_root: Path,
    reg: TokenRegistry,
    made_images: list[str],
    sf: Callable[..., Result],
    new_lab: Callable[..., Lab],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("STARFORGE_HOME", str(podman_server))
    tag, digest = push_image(reg, "private-tiny", made_images)
    reg.service.anonymous = "refuse"
    lab = job_lab(new_lab, "tiny", SCRIPT, {})
    before = sf("job", "ls", "--json").json()

    refused = submit(sf, lab, tag)
    assert refused.code == 2
    assert f"image registry {reg.address} needs credentials" in refused.err
    assert f"sf admin registry login {reg.address}" in refused.err
    assert sf("job", "ls", "--json").json() == before

    monkeypatch.setattr("sys.stdin", io.StringIO(READER[1] + "\n"))
    stored = sf("admin", "registry", "login", reg.address, "--username", READER[0],
                "--password-stdin")  # fmt: skip
    assert stored.code == 0, stored.err
    assert f"login stored for {reg.address}" in stored.out
    listed = sf("admin", "registry", "ls", "--json")
    assert [(i["host"], i["username"]) for i in listed.json()["logins"]] == [  # type: ignore[index, call-overload]
        (reg.address, READER[0])
    ]
    shown = sf("admin", "registry", "ls").out
    assert reg.address in shown and READER[0] in shown and READER[1] not in shown + listed.out

    got = submit(sf, lab, tag)
    assert got.code == 0, got.err
    run_id = str(got.json()["run_id"])  # type: ignore[index, call-overload]
    status, log = finished(sf, run_id)
    assert status == "succeeded", log
    pinned = f"{reg.address}/lab/tiny@{digest}"
    assert f"pulling the image {pinned} with the login stored for {reg.address}" in log
    assert "marker: private-tiny" in log
    # Admission and the runner's pull each logged in as the reader; nobody pulled anonymously.
    assert reg.service.pulled_by(READER[0]) >= 2
    assert not [r for r in reg.service.requests if r.user.startswith("!")]
    # The password is in no file of the run (its log, its state: the auth file is gone).
    [run_dir] = list((open_root / "st").glob(f"runs/*/*/tiny/{run_id}"))
    assert list(run_dir.glob("state/*auth*")) == []
    leaked = [p for p in files_under(run_dir) if READER[1].encode() in p.read_bytes()]
    assert leaked == []

    assert sf("admin", "registry", "logout", reg.address).code == 0
    assert sf("admin", "registry", "ls", "--json").json()["logins"] == []  # type: ignore[index, call-overload]
    again = submit(sf, lab, tag)
    assert again.code == 2 and f"sf admin registry login {reg.address}" in again.err
