"""A job forked, with the training stack already imported, instead of a fresh ``python``.

Importing torch, transformers, datasets, accelerate and trl takes a trl job 5 to 15 s of CPU
before its first line of work. The local executor starts the runners of trl jobs from a warm
trainer (``python -m starforge.runner.warm --trainer``), a warm runner that has imported that
stack under the environment its jobs will have (:func:`starforge.contract.env.import_env`) and
calls :func:`mark_imported`. A runner forked from it forks a :class:`Standby` first thing,
while it still has one thread: a copy of itself that waits on a pipe. When the runner has its
launch plan, :meth:`Standby.launch` either turns the standby into the job, which runs the plan's
``python SCRIPT`` or ``python -m MODULE`` in-process as a fresh interpreter would
(:mod:`starforge.runner.fresh`), or says why not, and the runner starts the job with Popen.

The job stays what Popen would have made it: the runner's own child (so it waits for it and
signals it as before), in the runner's process group (a stop or a kill of the group reaches it),
stdin from /dev/null, stdout and stderr the log (or the secrets masker's pipe), no other open
descriptor, the plan's working directory and exactly the plan's environment. Only a job whose
environment matches the one the stack was imported under, apart from the per-run variables
(:func:`starforge.contract.env.is_per_run`) and the run's dataset folders, is forked: a
library that read a variable at import sees the value the job would have given it. A job run
as another user, inside an image, under Slurm, or whose program is not this interpreter runs
fresh, and so does every job where the stack's imports initialised CUDA's driver (a forked
child could not use CUDA; ``warm.cuda_touched``).

The forked job reseeds numpy's global generator (Python's ``random`` reseeds itself at fork),
so two jobs never share random numbers a fresh interpreter would have drawn anew; the string
hash seed is the warm trainer's, one legal outcome of hash randomisation. What an import
changed in the environment is changed in the job's too (torch's TORCHINDUCTOR_CACHE_DIR); what
it derived from the working directory was derived from the warm trainer's (none of the
stack's imports does).

Forking with threads is unsafe, so the standby is forked before the runner starts its reporter
thread, and not at all when Python threads run. pyarrow's jemalloc keeps a background thread of
its own, which handles forks itself (as it must for multiprocessing's fork start method).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from typing import IO, Any

from starforge.contract.env import is_per_run
from starforge.runner import fresh

# Set in the warm trainer, inherited by its forks: the environment the stack was imported
# under, and what the imports themselves changed in it (torch sets TORCHINDUCTOR_CACHE_DIR).
_imported_under: dict[str, str] | None = None
_import_changes: tuple[dict[str, str], frozenset[str]] = ({}, frozenset())
_READ_CHUNK = 1 << 16


def mark_imported(before: dict[str, str]) -> None:
    """Record that this process imported the training stack under the environment ``before``;
    the runners it forks may then fork their jobs."""
    global _imported_under, _import_changes
    now = dict(os.environ)
    _imported_under = dict(before)
    set_ = {k: v for k, v in now.items() if before.get(k) != v}
    _import_changes = (set_, frozenset(k for k in before if k not in now))


def job_environ(env: dict[str, str]) -> dict[str, str]:
    """The environment of the forked job: the plan's, changed as its own imports of the stack
    would have changed it (they ran with the same variables, apart from per-run ones)."""
    set_, removed = _import_changes
    return {k: v for k, v in {**env, **set_}.items() if k not in removed}


def imported_under() -> dict[str, str] | None:
    """The environment the training stack was imported under; None when it was not."""
    return _imported_under


def env_difference(env: dict[str, str], per_run: set[str]) -> list[str]:
    """Names whose value in ``env`` differs from the environment of the imports (both read
    without the per-run variables and ``per_run``); empty when the job may be forked."""
    base = _imported_under or {}

    def fixed(e: dict[str, str]) -> dict[str, str]:
        return {k: v for k, v in e.items() if not is_per_run(k) and k not in per_run}

    ours, theirs = fixed(env), fixed(base)
    return sorted(k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k))


def program_of(argv: list[str]) -> tuple[str, str, list[str]] | None:
    """``("module", NAME, args)`` or ``("script", PATH, args)`` for ``python -m NAME args`` or
    ``python PATH args`` run by this interpreter; None for any other command."""
    if len(argv) < 2 or os.path.realpath(argv[0]) != os.path.realpath(sys.executable):
        return None
    if argv[1] == "-m":
        return ("module", argv[2], argv[3:]) if len(argv) >= 3 else None
    if argv[1].startswith("-"):  # interpreter flags: only a fresh interpreter applies them
        return None
    return "script", argv[1], argv[2:]


class ForkedJob:
    """The job as the runner sees it: the subset of ``subprocess.Popen`` that it uses."""

    def __init__(self, pid: int, stdout: IO[bytes] | None) -> None:
        self.pid = pid
        self.stdout = stdout
        self.returncode: int | None = None
        self._waiting = threading.Lock()

    def poll(self) -> int | None:
        # As Popen does: a poll while another thread (or the interrupted main thread) waits
        # answers "running"; the waiter records the code.
        if self.returncode is None and self._waiting.acquire(blocking=False):
            try:
                self._reap(os.WNOHANG)
            finally:
                self._waiting.release()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Its exit code; with ``timeout``, ``subprocess.TimeoutExpired`` when it runs on."""
        if timeout is None:
            with self._waiting:
                while self.returncode is None:
                    self._reap(0)
            return self.returncode
        deadline = time.monotonic() + timeout
        delay = 0.0005
        while self.poll() is None:  # as Popen.wait(timeout=) does: poll, with a growing sleep
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(str(self.pid), timeout)
            time.sleep(min(delay, left))
            delay = min(delay * 2, 0.05)
        return self.returncode

    def _reap(self, flags: int) -> None:
        try:
            pid, status = os.waitpid(self.pid, flags)
        except ChildProcessError:  # reaped already: nothing more will be known
            self.returncode = self.returncode if self.returncode is not None else 255
            return
        if pid == self.pid:
            self.returncode = os.waitstatus_to_exitcode(status)

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Standby:
    """A forked copy of this runner, waiting for a plan to run as the job."""

    def __init__(self, pid: int, go: int, pipe_out: int) -> None:
        self.pid = pid
        self._go: int | None = go  # the runner's end of the pipe the plan goes through
        self._pipe_out: int | None = pipe_out  # read end of the job's stdout, for the masker

    @classmethod
    def fork(cls) -> Standby | None:
        """A standby, when this process imported the training stack and runs one thread."""
        if _imported_under is None or threading.active_count() != 1:
            return None
        go_r, go_w = os.pipe()
        out_r, out_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the standby: never returns
            os.close(go_w)
            os.close(out_r)
            _wait_then_run(go_r, out_w)
        os.close(go_r)
        os.close(out_w)
        return cls(pid, go_w, out_r)

    def launch(
        self,
        argv: list[str],
        cwd: str,
        env: dict[str, str],
        *,
        log_fd: int | None,
        per_run: set[str],
    ) -> ForkedJob | str:
        """The standby turned into the job, or why it was not (then it has ended). The job's
        stdout and stderr: ``log_fd``, a descriptor this process had open when it forked the
        standby; None gives a pipe, read from the job's ``stdout``."""
        program = program_of(argv)
        why = ""
        if program is None:
            why = f"{argv[0]} is not a script or module of this interpreter"
        elif differ := env_difference(env, per_run):
            why = f"its environment differs from the warm trainer's ({', '.join(differ[:5])})"
        if why or self._go is None:
            self.cancel()
            return why or "the standby was used already"
        request = {"argv": argv, "cwd": cwd, "env": env, "log_fd": log_fd}
        try:
            with open(self._go, "wb", closefd=True) as go:
                self._go = None
                go.write(json.dumps(request).encode())
        except OSError as exc:  # it died (a signal to the group): it reads nothing
            self.cancel()
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, 0)
            return f"the standby ended before the start ({exc})"
        stdout = None
        if log_fd is None and self._pipe_out is not None:
            stdout = os.fdopen(self._pipe_out, "rb")
        elif self._pipe_out is not None:
            os.close(self._pipe_out)
        self._pipe_out = None
        return ForkedJob(self.pid, stdout)

    def cancel(self) -> None:
        """End an unused standby and reap it (idempotent)."""
        for fd in (self._go, self._pipe_out):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        if self._go is not None:
            self._go = None
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, 0)  # it exits at the end of the pipe
        self._pipe_out = None


def _wait_then_run(go: int, pipe_out: int) -> None:
    code = 0
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        chunks = []
        while chunk := os.read(go, _READ_CHUNK):
            chunks.append(chunk)
        if not chunks:  # cancelled
            os._exit(0)
        request: dict[str, Any] = json.loads(b"".join(chunks))
        log_fd = request.get("log_fd")
        out = log_fd if isinstance(log_fd, int) else pipe_out
        env = job_environ(dict(request["env"]))
        fresh.become(stdin=os.devnull, stdout=out, cwd=str(request["cwd"]), env=env)
        _reseed()
        kind, what, args = program_of(list(request["argv"])) or ("script", "", [])
        runs = fresh.run_module if kind == "module" else fresh.run_script
        code = runs(what, args)
    except BaseException:  # nothing of the runner's may run on in the job's place
        traceback.print_exc()
        code = 1
    fresh.exit_like_python(code)


def _reseed() -> None:
    """Draw anew what a fresh interpreter seeds at import from the system's entropy."""
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        with contextlib.suppress(Exception):
            numpy_random.seed()
