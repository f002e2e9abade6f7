"""``python -m starforge.runner.warm MODULE``: a warm runner, forking one runner per node start.

A fresh ``python -m starforge.runner`` spends most of its start importing (pydantic, httpx, the
catalog's adapters). The local executor instead keeps one warm process with those imports done
and asks it for each start: one JSON line on its stdin, ``{"binding", "log", "env"}``, answered
with one JSON line on its stdout, ``{"pid": N}`` or ``{"error": "..."}``. The child runs
``MODULE`` as ``python -m MODULE BINDING`` would (``runpy``, as ``__main__``): the runner's own
``starforge.runner`` in a server, another module where a test plays the runner.

Each start is a forked child that becomes exactly what a fresh runner would be: it leads a new
session (so its own process group, pgid = pid, which the executor signals and the runner records
for adoption), has /dev/null as stdin and the attempt's log as stdout and stderr, no other open
descriptors, the binding's folder as its cwd, the server's environment of the moment of the
start, default signal handlers, and exits with ``main``'s code after its non-daemon threads end
(an uncaught exception is printed to the log and exits 1, as the interpreter would). The answer
is sent only once the child leads its session, so a stop right after the start reaches it.

The warm process ignores SIGCHLD, so the kernel reaps its children and none lingers as a zombie;
it has no threads (forking is safe) and ends when its stdin closes (the server went away): the
runners it started live on, in their own sessions, as fresh ones would.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import runpy
import signal
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

import starforge.runner.main  # noqa: F401
from starforge.catalog.loader import all_methods

RUNNER_MODULE = "starforge.runner"
# What a runner imports on its way (some lazily: the HTTP stack, the framework adapters),
# imported once here so that no child pays for it; a name missing from this install is skipped.
PRELOAD = (
    "httpx",
    "httpcore._sync.connection_pool",
    "httpcore._backends.sync",
    "h11",
    "certifi",
    "encodings.idna",
    "starforge.client.http",
    "starforge.contract.observability",
    "starforge.catalog.adapters.custom",
    "starforge.catalog.adapters.nemo_rl",
    "starforge.catalog.adapters.trl",
    "starforge.catalog.adapters.verl",
)


def preload() -> None:
    """Import what runners need and read the catalog (cached: each child inherits it; a fresh
    runner would read the same files, which change only with the installed package)."""
    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    all_methods()


def serve(requests: Any, answers: Any, module: str = RUNNER_MODULE) -> None:
    """Answer one start per line of ``requests`` until it closes."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the forked runners
    for line in requests:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
            answer: dict[str, Any] = {"pid": start(request, module)}
        except Exception as exc:  # the server falls back to a fresh runner
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        answers.write(json.dumps(answer) + "\n")
        answers.flush()


def start(request: dict[str, Any], module: str) -> int:
    """Fork the runner of one node; its pid, once it leads its own session."""
    binding, log = str(request["binding"]), str(request["log"])
    env = {str(k): str(v) for k, v in dict(request.get("env") or {}).items()}
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(ready_r)
        _child(module, binding, log, env, ready_w)
    os.close(ready_w)
    try:
        led = os.read(ready_r, 1)  # empty when the child died before leading its session
    finally:
        os.close(ready_r)
    if not led:
        raise RuntimeError(f"the forked runner {pid} ended before it led its session")
    return pid


def _child(module: str, binding: str, log: str, env: dict[str, str], ready_w: int) -> None:
    code = 1
    try:
        os.setsid()
        os.write(ready_w, b"1")
        os.close(ready_w)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        _redirect(log)
        os.chdir(Path(binding).parent)
        os.environ.clear()
        os.environ.update(env)
        sys.argv = [module, binding]  # runpy puts the module's file first, as ``-m`` does
        code = _run(module)
    finally:
        os._exit(code)


def _redirect(log: str) -> None:
    """stdin from /dev/null, stdout and stderr into the log (appended), nothing else open."""
    null = os.open(os.devnull, os.O_RDONLY)
    out = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    keep = {0, 1, 2}
    for name in os.listdir("/proc/self/fd") if os.path.isdir("/proc/self/fd") else []:
        fd = int(name)
        if fd not in keep:
            with contextlib.suppress(OSError):  # the listing's own descriptor, closed already
                os.close(fd)


def _run(module: str) -> int:
    """``python -m module``, as a fresh interpreter ends it: its exit code, once its non-daemon
    threads ended and its atexit functions ran; an uncaught exception is printed, code 1."""
    code: int = 0
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
        code = 1
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    return int(code)


def main(argv: list[str]) -> int:
    preload()
    serve(sys.stdin, sys.stdout, argv[0] if argv else RUNNER_MODULE)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
