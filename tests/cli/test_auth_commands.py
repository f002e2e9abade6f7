"""``sf login|logout|token|admin user`` refusals that need no server: one line, exit 2."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cli.test_usage_errors import one_line_usage_error
from tests.conftest import Result


def test_login_needs_a_url_and_saves_nothing_for_a_bad_one(
    sf: Callable[..., Result], sf_home: Path
) -> None:
    got = sf("login", "--server", "forge.lab.example", "--token", "t")
    assert one_line_usage_error(got) == "error: --server 'forge.lab.example' is not a URL"
    assert not (sf_home / "credentials").exists()


def test_logout_without_a_login_says_there_was_nothing_to_forget(
    sf: Callable[..., Result],
) -> None:
    got = sf("logout", "--json")
    assert got.code == 0 and got.json() == {"logged_out": False}


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["token", "create", "--name", "my laptop"], "letters, digits"),
        (["token", "create", "--expires", "0"], "--expires"),
        (["admin", "user", "add", "alice", "--role", "owner"], "'owner' is not one of"),
        (["admin", "user", "set-role", "alice", "boss"], "'boss' is not one of"),
    ],
)
def test_bad_names_days_and_roles_are_refused_before_any_server_is_asked(
    sf: Callable[..., Result], sf_home: Path, args: list[str], needle: str
) -> None:
    assert needle in one_line_usage_error(sf(*args))
    assert not (sf_home / "server" / "server.json").exists()  # no server was started
