"""What the suite's preloaded drivers share (``tests/catalog/preloaded_driver.py``,
``tests/forked_servers_driver.py``): one JSON line per answer to their caller, and a forked child
that becomes a program and never returns into the driver's code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

from starforge.runner import fresh

ROOT = Path(__file__).resolve().parents[1]


def start_driver(module: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """``python -m module`` from the repository root under ``env``, its stdin and stdout piped
    (requests in, answers out)."""
    return subprocess.Popen(
        [sys.executable, "-m", module],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )


def answer(data: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(data) + "\n")
    sys.stdout.flush()


def fork_program(program: Callable[[], int]) -> int:
    """Fork; the child runs ``program`` (it takes the program's place and runs it, returning
    its exit code) and ends as python would. Returns the child's pid."""
    sys.stdout.flush()  # else the child could write the driver's pending answers again
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        code = program()
    except BaseException:  # nothing of the driver's may run on in the program's place
        traceback.print_exc()
    finally:
        fresh.exit_like_python(code)
    return 0  # never reached: the child exits above
