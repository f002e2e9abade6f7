"""`sf --help` starts light: the root lists its commands without importing them."""

from __future__ import annotations

import json
import subprocess
import sys

from starforge.cli.app import COMMANDS, load

HEAVY = ("httpx", "yaml", "sqlalchemy", "fastapi", "pydantic", "rich", "starforge.client")

_PROBE = """
import json, sys
from starforge.cli.main import main
code = main()  # as the `sf` process calls it: argv from sys.argv
# Imported modules only: not the stand-in `sf` puts for pydantic's plugin loader (cli/main.py).
loaded = sorted(name for name, module in sys.modules.items() if getattr(module, "__spec__", None))
print(json.dumps({"code": code, "modules": loaded}), file=sys.stderr)
"""


def _run(*args: str) -> tuple[str, int, set[str]]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, check=False
    )
    report = json.loads(done.stderr.strip().splitlines()[-1])
    return done.stdout, report["code"], set(report["modules"])


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in HEAVY or m.startswith(HEAVY))


def test_sf_help_lists_every_command_without_importing_heavy_modules() -> None:
    stdout, code, modules = _run("--help")
    assert code == 0
    for entry in COMMANDS:
        assert f"  {entry.name} " in stdout
    assert _heavy(modules) == []
    assert not any(m.startswith("starforge.cli.cmd_") for m in modules)


def test_sf_alone_prints_the_help_and_exits_2_without_heavy_imports() -> None:
    stdout, code, modules = _run()
    assert code == 2
    assert "Usage: sf" in stdout and "submit" in stdout
    # The one-line error on stderr is rich's; nothing of the network or the server is loaded.
    assert [m for m in _heavy(modules) if not m.startswith("rich")] == []


def test_a_command_imports_its_own_module_only() -> None:
    _, code, modules = _run("server", "--help")
    assert code == 0
    assert "starforge.cli.cmd_server" in modules
    assert "starforge.cli.cmd_admin" not in modules and "starforge.cli.cmd_job" not in modules


def test_each_summary_in_sf_help_is_the_commands_own_first_help_line() -> None:
    for entry in COMMANDS:
        command = load(entry, "rich")
        assert command.get_short_help_str(limit=300) == entry.summary, entry.name
