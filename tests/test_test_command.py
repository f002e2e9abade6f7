"""The README's test command is the whole of CI: a fresh machine running it runs every test."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def commands(script: Path) -> list[str]:
    """The script's command lines (no comments, no blank lines, no `set`/`cd` preamble)."""
    lines = [line.strip() for line in script.read_text().splitlines()]
    return [
        line
        for line in lines
        if line and not line.startswith("#") and not re.match(r"^(set|cd) ", line)
    ]


def test_ci_runs_exactly_the_readmes_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    test_command = re.search(r"^(bash scripts/test\.sh)\b", readme, re.M)
    assert test_command is not None, "the README names its test command"
    assert commands(ROOT / ".ci/run") == [test_command.group(1)]


def test_the_test_command_installs_the_browser_the_console_test_drives() -> None:
    steps = commands(ROOT / "scripts/test.sh")
    assert "bash scripts/setup-browser.sh" in steps
    assert steps.index("bash scripts/setup-browser.sh") < next(
        i for i, s in enumerate(steps) if "pytest" in s
    )
    browser = (ROOT / "tests/console/test_console_browser.py").read_text()
    setup = (ROOT / "scripts/setup-browser.sh").read_text()
    chromium = re.search(r'^CHROMIUM = "(.+)"$', browser, re.M)
    assert chromium is not None
    assert f"CHROMIUM={chromium.group(1)}\n" in setup
