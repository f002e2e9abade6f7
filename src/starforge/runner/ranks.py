"""Signals for the ranks of a distributed launch (``torchrun``), which live outside our group.

torchrun starts each local rank in a session of its own, so the executor's SIGTERM to the runner's
process group reaches the runner and the launcher but no rank; and torchrun's own SIGTERM
handling would give the ranks 30 s and abort at a second signal. The compiled plan therefore
starts torchrun with SIGTERM ignored (``catalog/adapters/base.py``), and the runner hands the
signal to the ranks itself: every process under the launcher, found through ``/proc``, gets one
SIGTERM, and ranks the launcher starts later get theirs as soon as they appear (and, since they
start with SIGTERM ignored like their launcher, once their own handler is in place). Each rank saves
(rank 0 writes), agrees on the step with the others and exits 143; torchrun then exits 1
("a child failed"), which the runner reads as the signal's exit (:func:`exit_code`). A SIGKILL
of the group ends the launcher, and the kernel ends its ranks (their parent-death signal, set
by the template's ``train.py``). In a container, the same hand-over goes through ``podman
exec`` (:class:`ContainerTermForwarder`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from pathlib import Path

TORCHRUN = "torchrun"
TORCHRUN_CHILD_FAILED = 1  # torchrun's exit when a rank exited non-zero
SIGTERM_EXIT = 128 + signal.SIGTERM
FORWARD_EVERY_S = 0.5


def descendants(root: int) -> list[int]:
    """Every live process under ``root`` (children, theirs, ...), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        fields = raw[raw.rfind(")") + 2 :].split()
        if len(fields) > 1 and fields[0] not in ("Z", "X"):
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def ignores_term(pid: int) -> bool:
    """Whether ``pid`` ignores SIGTERM now (``SigIgn`` of /proc/PID/status)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigIgn:"):
                return bool(int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


class TermForwarder:
    """SIGTERM, once each, to every process under a launcher until the launcher ends."""

    def __init__(self, launcher_pid: int) -> None:
        self.launcher_pid = launcher_pid
        self._told: set[int] = set()
        self._thread: threading.Thread | None = None
        self._done = threading.Event()

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._done.set()

    def _loop(self) -> None:
        while not self._done.is_set():
            for pid in descendants(self.launcher_pid):
                # A rank still importing ignores SIGTERM (inherited from the launcher): it is
                # told once its handler is in place, so the request is never lost.
                if pid not in self._told and not ignores_term(pid):
                    self._told.add(pid)
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGTERM)
            self._done.wait(FORWARD_EVERY_S)


# Inside a container the ranks live in its PID namespace, out of the runner's sight: ``podman
# exec`` runs this there (as the run's uid). It sends SIGTERM to every process but init, itself
# and those told before ($@), skipping those that still ignore SIGTERM (torchrun; a rank still
# importing), and prints the pids it told. Plain POSIX sh: the image need not have more.
IN_CONTAINER = r"""
told=" $* "
for d in /proc/[0-9]*; do
    p=${d#/proc/}
    case "$told" in *" $p "*) continue ;; esac
    if [ "$p" = 1 ] || [ "$p" = "$$" ]; then continue; fi
    ign=
    while read -r key value; do
        if [ "$key" = "SigIgn:" ]; then ign=$value; fi
    done < "$d/status" 2>/dev/null || continue
    if [ -z "$ign" ] || [ $(( 0x$ign >> 14 & 1 )) = 1 ]; then continue; fi
    kill -TERM "$p" 2>/dev/null && echo "$p"
done
"""


class ContainerTermForwarder(TermForwarder):
    """SIGTERM, once each, to the ranks inside a running container (``podman exec``)."""

    def __init__(self, container: str) -> None:
        super().__init__(launcher_pid=0)
        self.container = container

    def _loop(self) -> None:
        while not self._done.is_set():
            argv = ["podman", "exec", self.container, "sh", "-c", IN_CONTAINER, "sh"]
            try:
                done = subprocess.run(
                    [*argv, *map(str, sorted(self._told))],
                    capture_output=True,
                    text=True,
                    timeout=30,
                    check=False,
                )
            except (OSError, subprocess.SubprocessError):
                done = None
            if done is not None:
                self._told.update(int(p) for p in done.stdout.split() if p.isdigit())
            self._done.wait(FORWARD_EVERY_S)


def exit_code(code: int, *, launcher: str, terminating: bool) -> int:
    """The node's exit as the platform reads it: torchrun's "a child failed" after the runner
    passed on a SIGTERM is the ranks' answer to that signal (they saved and exited 143)."""
    if terminating and launcher == TORCHRUN and code == TORCHRUN_CHILD_FAILED:
        return SIGTERM_EXIT
    return code
