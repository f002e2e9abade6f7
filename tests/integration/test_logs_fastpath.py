"""`sf job logs RUN -n N --no-follow` as a fresh `sf` process against a real embedded server: the
stdlib fast path prints the same bytes as the full typer command without importing typer,
pydantic, httpx or rich, and anything it does not handle shows the full command's own error."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from starforge.project.lab import Lab
from tests.conftest import Result
from tests.integration.conftest import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.client]
HEAVY = ("typer", "pydantic", "httpx", "rich")

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


def heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in HEAVY)


def test_the_fast_path_prints_the_full_commands_bytes_without_importing_it(
    sf: Callable[..., Result], custom_lab: Callable[..., Lab]
) -> None:
    lab = custom_lab(steps=12)
    got = sf(
        "submit", "c1", "--profile", "h200:1", "--image", "reg.example/t:v1", "--json", cwd=lab.root
    )
    assert got.code == 0, got.err
    run_id = str(got.json()["run_id"])  # type: ignore[index]
    view = wait_for(sf, run_id, {"succeeded", "failed"})
    assert view["status"] == "succeeded"
    log = (Path(str(view["run_dir"])) / "logs" / "attempt-1.log").read_text()
    # The latest run (no RUN), a prefix of its id, each spelling of -n: the same lines.
    for args, lines in (([run_id, "-n", "5"], 5), ([run_id[:6], "--tail=2"], 2), (["-n3"], 3)):
        code, out, err, modules = sf_process("job", "logs", *args, "--no-follow")
        assert (code, err, heavy(modules)) == (0, "", [])
        assert out == "".join(log.splitlines(keepends=True)[-lines:])
        # `--debug` is outside the fast path's grammar: the full typer command.
        full_code, full_out, _, full_modules = sf_process(
            "--debug", "job", "logs", *args, "--no-follow"
        )
        assert (full_code, full_out) == (0, out)
        assert {"typer", "pydantic", "httpx"} <= full_modules


def test_an_unknown_run_falls_back_to_the_full_commands_error(sf: Callable[..., Result]) -> None:
    code, out, err, modules = sf_process("job", "logs", "r-nosuchrun", "-n", "5", "--no-follow")
    assert (code, out) == (1, "")
    assert "no run of yours matches 'r-nosuchrun'" in err
    assert "sf job ls" in err  # the hint
    assert "typer" in modules  # the full command printed it
