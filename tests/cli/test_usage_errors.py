"""Usage errors from the parser: one red line and a hint, exit 2, never a traceback.

None of these reach a server: the parser (or an argument's check) refuses them first.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.conftest import Result


def one_line_usage_error(got: Result) -> str:
    """The error line of a usage error, after checking its shape."""
    assert got.code == 2, got.err
    assert "Traceback" not in got.err + got.out
    lines = got.err.strip().splitlines()
    assert len(lines) == 2, got.err
    assert lines[0].startswith("error: ")
    assert lines[1].startswith("hint: ")
    return lines[0]


def test_an_unknown_command_keeps_the_did_you_mean(sf: Callable[..., Result]) -> None:
    got = sf("sumbit")
    assert one_line_usage_error(got) == ("error: No such command 'sumbit'. Did you mean 'submit'?")
    assert "`sf --help`" in got.err


def test_an_unknown_subcommand_names_its_group(sf: Callable[..., Result]) -> None:
    got = sf("admin", "mirror")
    assert "No such command 'mirror'" in one_line_usage_error(got)
    assert "`sf admin --help`" in got.err


def test_an_unknown_option_suggests_the_close_one(sf: Callable[..., Result]) -> None:
    got = sf("submit", "x", "--profil", "h200")
    line = one_line_usage_error(got)
    assert "No such option: --profil" in line
    assert "--profile" in line
    assert "`sf submit --help`" in got.err


def test_a_missing_argument_names_it(sf: Callable[..., Result]) -> None:
    got = sf("job", "stop")
    assert "Missing argument 'run'" in one_line_usage_error(got)
    assert "`sf job stop --help`" in got.err


def test_a_bad_value_names_the_option_and_the_type(sf: Callable[..., Result]) -> None:
    got = sf("job", "logs", "--tail", "abc")
    line = one_line_usage_error(got)
    assert "Invalid value for '-n' / '--tail'" in line
    assert "integer" in line


@pytest.mark.parametrize(
    "args",
    [
        ("job", "stop", ""),
        ("job", "pause", " "),
        ("job", "status", ""),
        ("job", "logs", ""),
        ("job", "metrics", ""),
        ("job", "console", ""),
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_an_empty_run_id_is_a_usage_error(sf: Callable[..., Result], args: tuple[str]) -> None:
    assert "a run id cannot be empty" in one_line_usage_error(sf(*args))


@pytest.mark.parametrize("args", [("admin", "quota", "show", ""), ("admin", "quota", "set", "")])
def test_an_empty_user_is_a_usage_error(sf: Callable[..., Result], args: tuple[str]) -> None:
    assert "a user name cannot be empty" in one_line_usage_error(sf(*args))


@pytest.mark.parametrize(
    ("group", "a_command"), [("job", "ls"), ("admin", "quota"), ("server", "start")]
)
def test_a_group_without_a_command_shows_its_help_and_exits_2(
    sf: Callable[..., Result], group: str, a_command: str
) -> None:
    got = sf(group)
    line = one_line_usage_error(got)
    assert line == f"error: `sf {group}` needs a command"
    assert f"Usage: sf {group}" in got.out
    assert a_command in got.err.splitlines()[1]


def test_help_and_version_still_exit_0(sf: Callable[..., Result]) -> None:
    assert sf("--version").code == 0
    got = sf("job", "--help")
    assert got.code == 0
    assert "Usage: sf job" in got.out
    assert got.err == ""
