"""Running a program in a forked process as a fresh ``python`` would run it, and ending it so.

The warm runner (:mod:`starforge.runner.warm`) forks runners, and a runner forked from the warm
trainer forks its job (:mod:`starforge.runner.jobfork`); each child then runs ``python -m
MODULE ARGS`` or ``python SCRIPT ARGS`` in-process with :func:`run_module` or :func:`run_script`.
What a fresh interpreter would give the program, they give it: ``sys.argv``, ``sys.path[0]``
(the script's real folder, or the working directory for ``-m``), ``__main__``, the same error
messages and exit codes for a missing script or module (2 and 1), an uncaught exception printed
with exit code 1, a ``KeyboardInterrupt`` that ends the process by SIGINT, ``SystemExit``'s
code (a non-integer one printed, code 1). :func:`exit_like_python` then ends the process as the
interpreter does: non-daemon threads joined, atexit functions run, stdio flushed.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import runpy
import signal
import sys
import threading
import traceback
from collections.abc import Callable


def become(*, stdin: str, stdout: int, cwd: str, env: dict[str, str]) -> None:
    """Take a fresh program's place in this forked process: ``stdin`` (a path) opened for
    reading as fd 0, the descriptor ``stdout`` as fds 1 and 2, no other descriptor open, ``cwd``
    and exactly ``env``."""
    source = os.open(stdin, os.O_RDONLY)
    os.dup2(source, 0)
    os.dup2(stdout, 1)
    os.dup2(stdout, 2)
    keep = {0, 1, 2}
    for name in os.listdir("/proc/self/fd") if os.path.isdir("/proc/self/fd") else []:
        fd = int(name)
        if fd not in keep:
            with contextlib.suppress(OSError):  # the listing's own descriptor, closed already
                os.close(fd)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)


def run_module(module: str, args: list[str]) -> int:
    """``python -m module *args`` in this process; the exit code it would have."""
    sys.argv = ["-m", *args]  # runpy puts the module's file first, as ``-m`` does
    sys.path[0] = os.getcwd()
    # ``python -m`` itself runs runpy's _run_module_as_main: the same search, the same
    # "No module named ..." line and exit code 1 when there is none.
    main_of = getattr(runpy, "_run_module_as_main")  # noqa: B009
    return outcome(lambda: main_of(module, True))


def run_script(script: str, args: list[str]) -> int:
    """``python script *args`` in this process; the exit code it would have."""
    if not os.path.isfile(script):
        where = os.path.abspath(script)
        sys.stderr.write(
            f"{sys.executable}: can't open file {where!r}: [Errno 2] No such file or directory\n"
        )
        return 2
    sys.argv = [script, *args]
    sys.path[0] = os.path.dirname(os.path.realpath(script))
    return outcome(lambda: runpy.run_path(script, run_name="__main__"))


def outcome(run: Callable[[], object]) -> int:
    """Run ``run`` as a program's body; the exit code a fresh interpreter would end with."""
    try:
        run()
    except SystemExit as exc:
        return _system_exit_code(exc.code)
    except KeyboardInterrupt:
        traceback.print_exc()
        _flush()
        # A fresh interpreter ends by SIGINT here, so its parent sees the signal.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        return 128 + signal.SIGINT
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


def _system_exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    sys.stderr.write(f"{code}\n")
    return 1


def exit_like_python(code: int) -> None:
    """End this process as the interpreter ends a program: wait for its non-daemon threads,
    run its atexit functions, flush stdio, then exit with ``code``. Never returns."""
    try:
        for thread in threading.enumerate():
            if thread is not threading.main_thread() and not thread.daemon:
                thread.join()
        atexit._run_exitfuncs()
        _flush()
    finally:
        os._exit(code)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()
