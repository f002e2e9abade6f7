"""``sf admin registry login`` refusals that need no server: a host that is no registry host,
a password on stdin without a username, an empty password. Nothing is sent, no server starts."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import Result


def refused_before_any_server(got: Result, sf_home: Path) -> str:
    assert got.code == 2, got.err
    assert "Traceback" not in got.err + got.out
    assert not (sf_home / "server" / "server.json").exists()  # no server was started
    return got.err.strip().splitlines()[0]


@pytest.mark.parametrize("host", ["https://ghcr.io", "ghcr.io/my-lab", "nvcr.io:"])
def test_a_host_that_is_no_registry_host_is_refused_locally(
    sf: Callable[..., Result], sf_home: Path, host: str
) -> None:
    got = sf("admin", "registry", "login", host, "--username", "u", "--password-stdin")
    line = refused_before_any_server(got, sf_home)
    assert f"{host!r} is not a registry host of the form HOST[:PORT]" in line


def test_a_password_on_stdin_needs_a_username(
    sf: Callable[..., Result], sf_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("secret-token\n"))
    got = sf("admin", "registry", "login", "nvcr.io", "--password-stdin")
    line = refused_before_any_server(got, sf_home)
    assert line == "error: --username is needed when the password comes from stdin"


def test_an_empty_password_is_refused_and_never_sent(
    sf: Callable[..., Result], sf_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("\n"))
    got = sf("admin", "registry", "login", "nvcr.io", "-u", "$oauthtoken", "--password-stdin")
    line = refused_before_any_server(got, sf_home)
    assert line == "error: registry nvcr.io: the password is empty"
