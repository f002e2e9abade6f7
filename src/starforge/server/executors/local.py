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

With a runner command of the form ``python -m MODULE`` (the default is ``python -m
starforge.runner``) a start goes through a warm runner (:mod:`starforge.runner.warm`): one
long-lived process, started at the first start, with the runner's imports done, that forks each
runner as a fresh interpreter would start it (its own session, the log as stdout/stderr, the
server's environment of the moment). The warm process ends when this server does (its stdin
closes); the runners live on. When it is absent, dead, not ready in time (it says when its
imports are done, before it reads anything) or answers with an error, that start (and the
next, which starts a new warm process) takes a fresh interpreter, as any other runner command
always does.

The runner of a trl job on the host (no image to run it in, no job user) is forked instead by
the warm trainer (``--trainer``), which has also imported torch, transformers, datasets,
accelerate and trl, so that the runner can fork its job rather than start a fresh interpreter
(:mod:`starforge.runner.jobfork`). It is started at the first such start, which waits for its
imports (what the job would have spent on them; at most 300 s, then that start is a fresh one),
under the environment its jobs will have
(:func:`~starforge.contract.env.import_env`); a start that needs another environment replaces
it. The runner checks the environment again before it forks, so a mismatch costs speed only.
``warm_trainer: false`` (``STARFORGE_WARM_TRAINER=0``) turns it off.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import signal
import subprocess
import threading
from pathlib import Path
from typing import IO

from starforge.contract.env import (
    WARM_TRAINER_FLAG,
    WARM_TRAINER_PRELOAD_ENV,
    Binding,
    import_env,
)
from starforge.contract.errors import StarForgeError

log = logging.getLogger(__name__)
PREFIX = "local:"
WARM_MODULE = "starforge.runner.warm"
TRAINER_FRAMEWORKS = frozenset({"trl"})  # whose jobs import what the warm trainer imports
ANSWER_TIMEOUT_S = 120.0  # a fork takes milliseconds
READY_TIMEOUT_S = 120.0  # its imports: a fraction of a second, seconds for the warm trainer


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


def proc_started_at(pid: int) -> float | None:
    """When ``pid`` started (seconds since the epoch, from /proc), or None when unknown."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
        ticks = int(raw[raw.rfind(")") + 2 :].split()[19])  # field 22: starttime
        boot = next(
            int(line.split()[1])
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime ")
        )
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def started_by_then(ref: str, at: float) -> bool:
    """Whether the live process of ``ref`` could be the runner that recorded itself at ``at``:
    it started no later than that (pids are reused: 32,768 of them on a default Linux, so an
    ended runner's pid may well be another process's by now)."""
    started = proc_started_at(parse_ref(ref))
    return started is None or started <= at + 1.0  # the record comes just after its start


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

    def __init__(self, command: list[str], *, warm_trainer: bool = True) -> None:
        self.command = list(command)
        self._procs: dict[int, subprocess.Popen[bytes]] = {}
        self._lock = threading.Lock()
        # ``python -m MODULE`` (the default runner's form) can be forked by a warm runner.
        warm = len(command) == 3 and command[1] == "-m"
        self._warm = WarmRunner([command[0], "-m", WARM_MODULE, command[2]]) if warm else None
        self._trainer: WarmRunner | None = None
        if warm and warm_trainer:
            # It is ready once torch, transformers and trl are imported: long on a loaded machine.
            trainer = [command[0], "-m", WARM_MODULE, WARM_TRAINER_FLAG, command[2]]
            self._trainer = WarmRunner(trainer, ready_timeout_s=300.0)

    def start(self, binding_path: Path, log_path: Path) -> str:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        warm, env = self._warm, None
        if self._trainer is not None and (imports := trainer_env(binding_path)) is not None:
            warm, env = self._trainer, imports
        pid = warm.start(binding_path, log_path, env) if warm is not None else None
        if pid is not None:
            return f"{PREFIX}{pid}"  # the warm process reaps it; liveness comes from /proc
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

    def close(self) -> None:
        """End the warm runners (the runners they started live on)."""
        for warm in (self._warm, self._trainer):
            if warm is not None:
                warm.close()

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


def trainer_env(binding_path: Path) -> dict[str, str] | None:
    """What the warm trainer must import under to start the runner of this binding, or None
    when its job would not be forked from it anyway (not trl, inside an image, another user)."""
    try:
        b = Binding.read(binding_path.read_bytes())
    except (OSError, ValueError):
        return None
    in_image = bool(b.image) and b.containers == "podman"
    if b.framework not in TRAINER_FRAMEWORKS or in_image or b.job_user or b.job_uids:
        return None
    # A forked job's /proc/self/environ is the warm trainer's: none of the server's settings
    # (its database URL, say) may be in it, as none is in a fresh job's environment.
    server = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("STARFORGE_", "FORGE_")) or k == WARM_TRAINER_PRELOAD_ENV
    }
    return {**server, **import_env(b)}


class WarmRunner:
    """The client side of :mod:`starforge.runner.warm`: one request line, one answer line."""

    def __init__(self, command: list[str], ready_timeout_s: float = READY_TIMEOUT_S) -> None:
        self.command = command
        self.ready_timeout_s = ready_timeout_s
        self._proc: subprocess.Popen[str] | None = None
        self._env: dict[str, str] | None = None  # what the running process was started with
        self._lock = threading.Lock()

    def start(
        self, binding_path: Path, log_path: Path, env: dict[str, str] | None = None
    ) -> int | None:
        """The pid of the runner the warm process forked, or None (start a fresh one). ``env``:
        the environment the warm process must have been started with (a process started with
        another one is replaced); None takes the server's of its first start."""
        request = {"binding": str(binding_path), "log": str(log_path), "env": dict(os.environ)}
        with self._lock:
            if env is not None and self._proc is not None and env != self._env:
                self._drop(self._proc)
            proc = self._process(env)
            if proc is None:
                return None
            stdin, stdout = _pipes(proc)
            try:
                stdin.write(json.dumps(request) + "\n")
                stdin.flush()
            except OSError:  # it had died: it read nothing, so nothing was started
                self._drop(proc)
                return None
            answer = self._answer(proc, stdout)
            pid = answer.get("pid")
            if isinstance(pid, int):
                return pid
            # It said why it started nothing (its fork failed): this start takes a fresh one.
            log.warning("the warm runner did not start %s: %s", binding_path, answer.get("error"))
            self._drop(proc)  # a new one at the next start
            return None

    def _answer(self, proc: subprocess.Popen[str], stdout: IO[str]) -> dict[str, object]:
        """Its answer; an error when it went silent after reading the request, since it may
        have forked the runner then: starting a second one could run the node twice."""
        answer = _line(stdout, ANSWER_TIMEOUT_S)
        if answer is None:
            self._drop(proc)
            raise StarForgeError("the warm runner went away while starting the runner")
        return answer

    def _process(self, env: dict[str, str] | None) -> subprocess.Popen[str] | None:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        try:
            self._proc = subprocess.Popen(
                self.command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                start_new_session=True,  # a signal to the server's group is not the runners'
                close_fds=True,
                env=env,
            )
            self._env = env
        except OSError:
            log.warning("could not start the warm runner", exc_info=True)
            self._proc = None
            return None
        # Until it says it is ready it has read nothing: one that never does (its imports
        # failed or hang) costs this start a fresh runner, never a start twice.
        if _line(_pipes(self._proc)[1], self.ready_timeout_s) != {"ready": True}:
            log.warning("the warm runner %s did not get ready", self.command[2:])
            self._drop(self._proc, kill=True)
            return None
        return self._proc

    def _drop(self, proc: subprocess.Popen[str], *, kill: bool = False) -> None:
        stdin, _ = _pipes(proc)
        with contextlib.suppress(OSError):
            stdin.close()  # its end of file: it exits
        if kill:
            proc.kill()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if self._proc is proc:
            self._proc = None

    def close(self) -> None:
        with self._lock:
            if self._proc is not None:
                self._drop(self._proc)


def _line(stdout: IO[str], timeout_s: float) -> dict[str, object] | None:
    """The next JSON object the warm process writes within ``timeout_s``; None for none."""
    ready, _, _ = select.select([stdout], [], [], timeout_s)
    line = stdout.readline() if ready else ""
    try:
        answer = json.loads(line) if line else None
    except ValueError:
        return None
    return answer if isinstance(answer, dict) else None


def _pipes(proc: subprocess.Popen[str]) -> tuple[IO[str], IO[str]]:
    assert proc.stdin is not None and proc.stdout is not None
    return proc.stdin, proc.stdout
