"""The local executor: runners as process groups on this machine.

Each runner is started with ``start_new_session=True``, so it leads its own process group (its
pgid is its pid) and survives the server: stopping or restarting the server never stops a run.
The reference is ``local:<pgid>``. Handles of processes this server started are kept and polled so
they are reaped (no zombies); processes started by an earlier server are checked through
``/proc/<pid>/stat`` (gone or a zombie means dead). ``stop`` sends SIGTERM to the group and
schedules a SIGKILL after the grace period on a timer thread, so it never blocks the event loop.

Liveness is the runner's (the group leader's): a runner killed with SIGKILL leaves its training
running in the group, so a lost runner's group is ``kill``-ed at once. ``adopt`` turns a runner's
own record (pid, pgid) back into a reference, for a start the server died before recording.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
from pathlib import Path

from starforge.contract.errors import StarForgeError

log = logging.getLogger(__name__)
PREFIX = "local:"


def parse_ref(ref: str) -> int:
    if not ref.startswith(PREFIX) or not ref[len(PREFIX) :].isdigit():
        raise StarForgeError(f"{ref!r} is not a local executor reference")
    return int(ref[len(PREFIX) :])


def proc_state(pid: int) -> str | None:
    """The one-letter state of ``pid`` from /proc, or None when there is no such process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    except OSError:
        return None
    # The command name is in parentheses and may itself contain spaces or ')'.
    rest = raw[raw.rfind(")") + 2 :]
    return rest[:1] or None


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    state = proc_state(pid)
    if state is not None:
        return state not in {"Z", "X"}
    if Path("/proc/self").exists():
        return False
    try:  # no procfs (e.g. macOS): fall back to a signal-0 probe
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class LocalExecutor:
    name = "local"

    def __init__(self, command: list[str]) -> None:
        self.command = list(command)
        self._procs: dict[int, subprocess.Popen[bytes]] = {}
        self._lock = threading.Lock()

    def start(self, binding_path: Path, log_path: Path) -> str:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as out:
            proc = subprocess.Popen(
                [*self.command, str(binding_path)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                start_new_session=True,
                close_fds=True,
                cwd=str(binding_path.parent),
            )
        with self._lock:
            self._procs[proc.pid] = proc
        self.reap()
        return f"{PREFIX}{proc.pid}"

    def reap(self) -> None:
        """Collect every finished child so none lingers as a zombie."""
        with self._lock:
            for pid, proc in list(self._procs.items()):
                if proc.poll() is not None:
                    del self._procs[pid]

    def is_alive(self, ref: str) -> bool:
        pid = parse_ref(ref)
        with self._lock:
            proc = self._procs.get(pid)
            if proc is not None:
                if proc.poll() is None:
                    return True
                del self._procs[pid]
                return False
        return pid_alive(pid)

    def adopt(self, record: dict[str, object]) -> str | None:
        """The reference of the live runner a runner record names, or None."""
        pid, pgid = record.get("pid"), record.get("pgid")
        if not isinstance(pid, int) or not isinstance(pgid, int) or pid != pgid:
            return None  # a local runner leads its own group
        return f"{PREFIX}{pgid}" if pid_alive(pid) else None

    def kill(self, ref: str) -> None:
        """SIGKILL the whole group now (what a lost runner left running)."""
        self._signal(parse_ref(ref), signal.SIGKILL)
        self.reap()

    def stop(self, ref: str, grace_s: float) -> None:
        pgid = parse_ref(ref)
        if not self._signal(pgid, signal.SIGTERM):
            return
        timer = threading.Timer(grace_s, self._force, args=(pgid,))
        timer.daemon = True
        timer.start()

    def _force(self, pgid: int) -> None:
        if self._group_exists(pgid):
            log.info("process group %s outlived its grace period; sending SIGKILL", pgid)
            self._signal(pgid, signal.SIGKILL)
        self.reap()

    @staticmethod
    def _group_exists(pgid: int) -> bool:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    @staticmethod
    def _signal(pgid: int, sig: signal.Signals) -> bool:
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return False
        except PermissionError:
            log.warning("not allowed to signal process group %s", pgid)
            return False
        return True
