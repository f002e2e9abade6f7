"""The warm client's decisions, without a daemon or a socket: which commands and processes go to
it, the switch that turns it off, and whom a daemon agrees to serve (its code, the caller's
interpreter and startup environment)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from starforge.cli import warm_client, warm_daemon
from tests.conftest import Result


@pytest.mark.parametrize("value", ["0", "false", "No", " off "])
def test_the_switch_turns_the_warm_client_off(
    value: str, monkeypatch: pytest.MonkeyPatch, sf_home: Path
) -> None:
    monkeypatch.setenv("STARFORGE_WARM_CLIENT", value)
    assert not warm_client.enabled()
    assert warm_client.run(["submit", "c1"]) is None
    assert not warm_client.folder(sf_home).exists()  # and no daemon was started


def test_only_submit_and_job_ls_go_to_the_warm_client(
    monkeypatch: pytest.MonkeyPatch, sf_home: Path
) -> None:
    monkeypatch.delenv("STARFORGE_WARM_CLIENT")
    assert warm_client.enabled()
    for args in (["job", "status"], ["job"], ["jobs", "ls"], ["--help"], [], ["submitx"]):
        assert warm_client.run(args) is None
    assert not warm_client.folder(sf_home).exists()


def test_main_called_with_arguments_runs_in_its_own_process(
    sf: Callable[..., Result], monkeypatch: pytest.MonkeyPatch, sf_home: Path, tmp_path: Path
) -> None:
    """Tests and the daemon's children call main(ARGS): never through the warm client."""
    monkeypatch.delenv("STARFORGE_WARM_CLIENT")
    got = sf("submit", "c1", cwd=tmp_path)
    assert got.code != 0 and "starforge.yaml" in got.err
    assert not warm_client.folder(sf_home).exists()


def _daemon(sf_home: Path) -> warm_daemon.Daemon:
    return warm_daemon.Daemon(sf_home, {"NO_COLOR", "COLUMNS"}, lock=None)


def _request(**env: str | None) -> dict[str, object]:
    caller = {k: v for k, v in {**os.environ, **env}.items() if v is not None}
    return {"env": caller, "context": warm_client.context(), "argv": ["submit"], "cwd": "/"}


def test_a_daemon_serves_a_caller_whose_startup_is_its_own(
    sf_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon = _daemon(sf_home)
    # Variables read by nobody at import (the server, a token, the terminal's name) may differ.
    assert daemon.refusal(_request(STARFORGE_SERVER="http://x", SOME_TOOL="1")) is None
    monkeypatch.setattr(sys, "path", [*sys.path, "/elsewhere"])
    # Another sys.path: another set of modules.
    assert daemon.refusal(_request()) == "the caller's interpreter differs (path)"


@pytest.mark.parametrize(
    "changed",
    [
        {"LANG": "xx_YY.UTF-8"},  # the interpreter's locale and stream encodings
        {"PYTHONIOENCODING": "latin-1"},
        {"LC_ALL": None} if "LC_ALL" in os.environ else {"LC_ALL": "C"},
        {"COLUMNS": "33"},  # read by a module while the daemon imported it
    ],
)
def test_a_daemon_refuses_a_caller_whose_startup_environment_differs(
    sf_home: Path, changed: dict[str, str | None]
) -> None:
    why = _daemon(sf_home).refusal(_request(**changed))
    assert why == f"the caller's startup environment differs ({next(iter(changed))})"


def test_the_fingerprint_changes_with_an_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site-packages"
    site.mkdir()
    monkeypatch.setattr(sys, "path", [*sys.path, str(site)])
    before = warm_daemon.fingerprint()
    assert warm_daemon.fingerprint() == before
    (site / "new_package.py").write_text("")
    assert warm_daemon.fingerprint() != before


def test_the_imports_report_the_environment_they_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(warm_daemon, "PRELOAD", ("tests.cli._reads_env_at_import",))
    monkeypatch.delitem(sys.modules, "tests.cli._reads_env_at_import", raising=False)
    assert "SF_TEST_READ_AT_IMPORT" in warm_daemon.preload()
    assert type(os.environ).__name__ == "_Environ"  # os.environ is itself again
