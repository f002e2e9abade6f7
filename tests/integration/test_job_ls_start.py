"""`sf job ls` as a fresh `sf` process against a real embedded server: it prints what the command
prints in-process, without typer's pydantic adapters, pydantic's plugin loader or
`importlib.metadata` (cli/coercion.py, cli/main.py), and a bad value is still typer's error."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable

import pytest

from starforge.project.lab import Lab
from tests.conftest import Result
from tests.integration.conftest import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.client]
NOT_IMPORTED = ("typer._adapters", "importlib.metadata", "click", "pygments")

_PROBE = """
import json, sys
from starforge.cli.main import main
code = main()  # as the `sf` process calls it: argv from sys.argv
loaded = sorted(name for name, module in sys.modules.items() if module is not None)
print(json.dumps({"code": code, "modules": loaded}), file=sys.stderr)
"""


def sf_process(*args: str) -> tuple[int, str, str, set[str]]:
    """A fresh `sf ARGS` (the module's server: STARFORGE_HOME is in the environment):
    (exit code, stdout, stderr without the probe's line, the modules it imported)."""
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, check=False
    )
    *err, last = done.stderr.splitlines()
    report = json.loads(last)
    return report["code"], done.stdout, "\n".join(err), set(report["modules"])


def test_a_fresh_sf_job_ls_lists_the_runs_without_typers_adapters(
    sf: Callable[..., Result], custom_lab: Callable[..., Lab]
) -> None:
    lab = custom_lab(steps=2)
    got = sf(
        "submit", "c1", "--profile", "h200:1", "--image", "reg.example/t:v1", "--json", cwd=lab.root
    )
    assert got.code == 0, got.err
    run_id = str(got.json()["run_id"])  # type: ignore[index]
    assert wait_for(sf, run_id, {"succeeded", "failed"})["status"] == "succeeded"

    code, out, err, modules = sf_process("job", "ls", "--json")
    assert (code, err) == (0, "")
    assert json.loads(out) == sf("job", "ls", "--json").json()
    assert [m for m in sorted(modules) if m.startswith(NOT_IMPORTED)] == []

    code, out, err, modules = sf_process("job", "ls", "-n", "1")
    assert (code, err) == (0, "")
    header, row, *_ = out.splitlines()
    assert header.split()[:3] == ["RUN", "STATUS", "EXPERIMENT"]
    assert row.split()[:2] == [run_id, "succeeded"]
    assert "typer._adapters" not in modules  # "1" read as typer would, without its adapter


def test_a_bad_value_in_a_fresh_sf_is_typers_usage_error() -> None:
    code, out, err, modules = sf_process("job", "ls", "--limit", "ten")
    assert (code, out) == (2, "")
    assert err.splitlines()[0] == (
        "error: Invalid value for '--limit' / '-n': Input should be a valid integer, unable to "
        "parse string as an integer"
    )
    assert "typer._adapters" in modules  # typer's own coercion said so
