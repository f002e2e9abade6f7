"""Running a trl template's scripts as the local executor runs a trl job: forked from a python
that has imported the training stack, instead of a fresh interpreter that spends about 5 s of CPU
importing torch, transformers and trl before its first line.

One driver per test process (``tests/catalog/preloaded_driver.py``), started at the first job
and ended with the session (``tests/catalog/conftest.py``). Jobs run one at a time, each with its
own stdout and stderr files. Their environment is :func:`base_env` plus the per-run ``FORGE_*``
variables: any other difference, or a program that is not this interpreter, makes the driver
start the job with Popen instead, and :attr:`Job.why` says why.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import forking

# The tests that use the driver run on one xdist worker: one driver's imports (about 6 s of CPU)
# instead of one per worker. Their modules put it in their pytestmark.
ONE_WORKER = pytest.mark.xdist_group("catalog-preloaded")
READY_LIMIT_S = 300.0  # only bounds a failure: the imports take seconds


class Preloaded:
    """The driver process and the folder of its jobs' output."""

    def __init__(self) -> None:
        self.home = Path(tempfile.mkdtemp(prefix="sf-preloaded-"))
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("FORGE_")},
            "HF_HUB_OFFLINE": "1",
            "HF_HOME": str(self.home / "hf-home"),
            "OMP_NUM_THREADS": "1",
            "PYTHONUNBUFFERED": "1",
        }
        self.env.pop("PYTEST_CURRENT_TEST", None)  # pytest's own, changed at every test
        self.proc = forking.start_driver("tests.catalog.preloaded_driver", self.env)
        self._buffer = b""
        self._jobs = 0
        self.job: Job | None = None
        ready = self.answer(READY_LIMIT_S)
        assert ready == {"ready": True}, ready

    def answer(self, timeout: float | None) -> dict[str, Any] | None:
        """The driver's next answer line; None when none came within ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise AssertionError(f"the preloaded driver ended (exit {self.proc.wait()})")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return dict(json.loads(line))

    def start(self, argv: list[str], cwd: Path, env: dict[str, str]) -> Job:
        assert self.job is None or self.job.poll() is not None, "one job at a time"
        self._jobs += 1
        out = self.home / f"job-{self._jobs}"
        for made in (f"{out}.out", f"{out}.err"):
            Path(made).touch()  # before the start: a reader may open them at once
        request = {
            "argv": argv,
            "cwd": str(cwd),
            "env": env,
            "stdout": f"{out}.out",
            "stderr": f"{out}.err",
        }
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(request) + "\n").encode())
        self.proc.stdin.flush()
        started = self.answer(None)
        assert started is not None and "pid" in started, started
        self.job = Job(self, int(started["pid"]), bool(started["forked"]), str(started["why"]), out)
        if not self.job.forked:  # still a correct run, only a slower one: say why
            warnings.warn(f"{argv[1]} started fresh: {self.job.why}", stacklevel=2)
        return self.job

    def close(self) -> None:
        if self.job is not None and self.job.poll() is None:
            self.job.send_signal(signal.SIGKILL)
            self.job.wait(60)
        if self.proc.stdin is not None:
            self.proc.stdin.close()  # the driver ends at the end of its input
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        shutil.rmtree(self.home, ignore_errors=True)


class Job:
    """One job of the driver: a subset of Popen's interface, and its output files."""

    def __init__(self, driver: Preloaded, pid: int, forked: bool, why: str, out: Path) -> None:
        self.driver, self.pid, self.forked, self.why = driver, pid, forked, why
        self.stdout_path, self.stderr_path = Path(f"{out}.out"), Path(f"{out}.err")
        self.returncode: int | None = None

    def poll(self) -> int | None:
        return self._ended(0.0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._ended(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(["train"], timeout or 0.0)
        return code

    def _ended(self, timeout: float | None) -> int | None:
        if self.returncode is None:
            answer = self.driver.answer(timeout)
            if answer is not None:
                self.returncode = int(answer["code"])
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)

    def lines(self) -> Iterator[str]:
        """The job's stdout, line by line as it writes them, until it has ended."""
        with self.stdout_path.open() as out:
            partial = ""
            while True:
                ended = self.poll() is not None  # before the read: nothing written is missed
                chunk = out.read()
                partial += chunk
                *whole, partial = partial.split("\n")
                for line in whole:
                    yield line + "\n"
                if ended and not chunk:
                    if partial:
                        yield partial
                    return
                if not chunk:
                    self._ended(0.05)  # wait for more output, or the end

    def output(self) -> tuple[str, str]:
        """What the job wrote to stdout and to stderr (after its end)."""
        return self.stdout_path.read_text(), self.stderr_path.read_text()


_shared: Preloaded | None = None


def shared() -> Preloaded:
    """This process's driver, started at the first call."""
    global _shared
    if _shared is None:
        _shared = Preloaded()
    return _shared


def close_shared() -> None:
    global _shared
    if _shared is not None:
        _shared.close()
        _shared = None


def base_env() -> dict[str, str]:
    """The environment the driver imported under: a job's, before its ``FORGE_*`` variables."""
    return dict(shared().env)


def start(script: str, cwd: Path, env: dict[str, str]) -> Job:
    """``python SCRIPT`` in ``cwd`` with exactly ``env``, forked when it can be."""
    return shared().start([sys.executable, script], cwd, env)


def run(script: str, cwd: Path, env: dict[str, str], timeout: float) -> tuple[int, str, str]:
    """``python SCRIPT`` to its end: its exit code, stdout and stderr."""
    job = start(script, cwd, env)
    try:
        code = job.wait(timeout)
    except subprocess.TimeoutExpired:
        job.send_signal(signal.SIGKILL)
        job.wait()
        raise
    out, err = job.output()
    return code, out, err
