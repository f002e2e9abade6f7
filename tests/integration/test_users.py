"""Three users on one real server: an admin (the server's local user), members A and B, and a
viewer, each driving ``sf`` with their own token, as a lab would.

B can neither see, stop nor read the logs of A's run (each answers "not found", as if the run did
not exist); the viewer cannot submit; quotas are per user (A's second run waits over A's quota
while B's run starts). Jobs wait for a gate file the test creates, so the test decides when each
run ends and never asserts on durations.
"""

from __future__ import annotations

import stat
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from starforge.client import config
from starforge.project import experiments
from starforge.project.lab import Lab
from tests.conftest import Result, commit_all
from tests.integration.conftest import embedded_server, wait_for

pytestmark = pytest.mark.integration
IMAGE = "registry.example/train:v1"
CURVES = "https://wandb.example/team/lab"
INVENTORY = [{"name": "h200-1", "series": "h200", "gpus": 8}]
GATED = """#!/usr/bin/env bash
set -euo pipefail
echo "secret output of $FORGE_RUN_ID"
while [[ ! -e "{gates}/$FORGE_RUN_ID" ]]; do sleep 0.05; done
"""
ENDED = {"succeeded", "failed", "stopped"}


@pytest.fixture(scope="module")
def server_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with embedded_server(tmp_path_factory.mktemp("sf-users"), {"inventory": INVENTORY}) as home:
        yield home


@pytest.fixture
def gates(tmp_path: Path) -> Path:
    folder = tmp_path / "gates"
    folder.mkdir()
    return folder


@pytest.fixture
def gated_lab(new_lab: Callable[..., Lab], gates: Path) -> Lab:
    made = new_lab()
    experiments.new_experiment(made, "g", "custom/custom")
    folder = made.root / "experiments" / "g"
    (folder / "train.sh").write_text(GATED.format(gates=gates))
    (folder / "lab-id.txt").write_text(f"{uuid.uuid4()}\n")
    commit_all(made.root, "a gated job")
    return made


class Team:
    """Runs ``sf`` as one user or another: each user's own server URL and token in the env."""

    def __init__(self, sf: Callable[..., Result], monkeypatch: pytest.MonkeyPatch) -> None:
        self.sf, self.monkeypatch = sf, monkeypatch
        info = config.read_server_file()
        assert info is not None
        self.url = str(info["url"])
        self.tokens: dict[str, str] = {}

    def add(self, name: str, role: str) -> None:
        got = self.sf("admin", "user", "add", name, "--role", role, "--json")
        assert got.code == 0, got.err
        body = got.json()
        assert isinstance(body, dict) and body["role"] == role
        self.tokens[name] = str(body["token"])

    def as_(self, name: str, *args: str, cwd: Path | None = None) -> Result:
        self.monkeypatch.setenv("STARFORGE_SERVER", self.url)
        self.monkeypatch.setenv("STARFORGE_TOKEN", self.tokens[name])
        try:
            return self.sf(*args, cwd=cwd)
        finally:
            self.monkeypatch.delenv("STARFORGE_SERVER")
            self.monkeypatch.delenv("STARFORGE_TOKEN")

    def submit(self, name: str, lab: Lab) -> Result:
        return self.as_(
            name, "submit", "g", "--profile", "h200:1", "--image", IMAGE,
            "--observability-url", CURVES, "--json", cwd=lab.root,
        )  # fmt: skip

    def submitted(self, name: str, lab: Lab) -> str:
        got = self.submit(name, lab)
        assert got.code == 0, got.err
        body = got.json()
        assert isinstance(body, dict)
        return str(body["run_id"])

    def status(self, name: str, run_id: str) -> dict[str, object]:
        got = self.as_(name, "job", "status", run_id, "--json")
        assert got.code == 0, got.err
        body = got.json()
        assert isinstance(body, dict)
        return body


def test_members_see_only_their_own_runs_viewers_cannot_submit_and_quotas_are_per_user(
    sf: Callable[..., Result],
    monkeypatch: pytest.MonkeyPatch,
    gated_lab: Lab,
    gates: Path,
) -> None:
    team = Team(sf, monkeypatch)
    team.add("alice", "member")
    team.add("bob", "member")
    team.add("vic", "viewer")
    assert sf("admin", "quota", "set", "alice", "--max-gpus", "1").code == 0

    first = team.submitted("alice", gated_lab)
    assert wait_for(sf, first, {"running", *ENDED})["status"] == "running"  # as the admin
    for args in (["job", "status", first], ["job", "stop", first], ["job", "logs", first]):
        denied = team.as_("bob", *args)
        assert denied.code == 1 and f"no run of yours matches '{first}'" in denied.err, args
    assert team.status("alice", first)["status"] == "running"  # bob's stop changed nothing
    listed = team.as_("bob", "job", "ls", "--json").json()
    assert listed == []

    refused = team.submit("vic", gated_lab)
    assert refused.code == 1 and "only members, operators and admins may submit" in refused.err

    waiting = team.submitted("alice", gated_lab)  # alice's one GPU is in use by her first run
    bobs = team.submitted("bob", gated_lab)
    assert wait_for(sf, bobs, {"running", *ENDED})["status"] == "running"
    held = team.status("alice", waiting)
    while "your quota" not in str(held["reason"]) and held["status"] == "queued":
        held = team.status("alice", waiting)  # the reason comes with the scheduler's next pass
    assert held["status"] == "queued" and "your quota" in str(held["reason"])

    for run_id in (first, waiting, bobs):
        (gates / run_id).touch()
    assert wait_for(sf, waiting, {"running", *ENDED})["status"] in {"running", "succeeded"}
    for run_id in (first, waiting, bobs):
        assert wait_for(sf, run_id, ENDED)["status"] == "succeeded"


def test_login_saves_a_private_credential_and_logout_returns_to_the_local_server(
    sf: Callable[..., Result], monkeypatch: pytest.MonkeyPatch, server_home: Path
) -> None:
    team = Team(sf, monkeypatch)
    team.add("carol", "operator")
    local = sf("whoami", "--json").json()
    assert isinstance(local, dict) and (local["role"], local["via"]) == ("admin", "embedded")

    bad = sf("login", "--server", team.url, "--token", "not-a-token")
    assert bad.code == 1 and "the token is not valid" in bad.err
    assert not (server_home / "credentials").exists()  # nothing saved for a refused token

    got = sf("login", "--server", team.url, "--token", team.tokens["carol"], "--json")
    assert got.code == 0, got.err
    try:
        saved = server_home / "credentials"
        assert stat.S_IMODE(saved.stat().st_mode) == 0o600
        me = sf("whoami", "--json").json()
        assert isinstance(me, dict)
        assert (me["user"], me["role"], me["server"], me["via"]) == (
            "carol", "operator", team.url, "login",
        )  # fmt: skip
        made = sf("token", "create", "--name", "ci", "--expires", "7", "--json").json()
        assert isinstance(made, dict) and made["name"] == "ci" and made["expires_at"]
        assert sf("token", "revoke", "ci").code == 0
        monkeypatch.setenv("STARFORGE_SERVER", team.url)
        monkeypatch.setenv("STARFORGE_TOKEN", str(made["token"]))
        revoked = sf("whoami")
        assert revoked.code == 1 and "the token was revoked" in revoked.err
        monkeypatch.delenv("STARFORGE_SERVER")
        monkeypatch.delenv("STARFORGE_TOKEN")
        denied = sf("admin", "user", "ls")
        assert denied.code == 1  # the refusal names the action and the role it needs
        assert "only admins may list users; carol's role is operator" in denied.err
    finally:
        assert sf("logout").code == 0
    back = sf("whoami", "--json").json()
    assert isinstance(back, dict) and back["via"] == "embedded" and back["role"] == "admin"
