"""Per-run uids: an attempt takes a uid of the server's range that no live run holds.

Like systemd's DynamicUser, the uid needs no passwd entry: the runner (root) starts the job with
it and hands the run's folders to it. Who holds which uid is a file per uid under
``<storage root>/uids/`` (root's alone), written under an exclusive ``flock`` of that folder, so
two runners never take one uid, and the nodes of one attempt on one host take the same one (the
holder names the run and the attempt). A holder file whose runner is gone and under whose uid no
process runs any more is free again (its runner was killed before it could give it back);
a runner gives its uid back once no process of that uid is left.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path

from starforge.client.config import pid_alive
from starforge.contract.errors import RunnerError
from starforge.contract.layout import RunLayout

FOLDER = "uids"


def folder(storage_root: Path) -> Path:
    found = storage_root / FOLDER
    found.mkdir(mode=0o700, exist_ok=True)
    os.chmod(found, 0o700)
    return found


@contextlib.contextmanager
def _locked(storage_root: Path) -> Iterator[Path]:
    where = folder(storage_root)
    with open(where / ".lock", "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield where
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def uid_has_processes(uid: int) -> bool:
    """Whether any live process runs under ``uid`` (real or effective), from /proc."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        zombie = "\nState:\tZ" in status
        for line in status.splitlines():
            if line.startswith("Uid:"):
                if uid in {int(v) for v in line.split()[1:3]} and not zombie:
                    return True
                break
    return False


def _alive(pid: object) -> bool:
    """Whether a holder file's ``pid`` names a live process (a zombie runner is gone)."""
    return isinstance(pid, int) and pid > 0 and pid_alive(pid)


def _holder(path: Path) -> dict[str, object] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def take(
    storage_root: Path,
    first: int,
    last: int,
    run_id: str,
    attempt: int,
    record: dict[str, object] | None = None,
) -> int:
    """The attempt's uid: the one it holds already (another node, a restarted runner), else the
    lowest free one of [first, last]. ``record`` (the run's folder, its group) is kept with it:
    whoever takes the uid again after a runner that died first takes that run's folders back."""
    me = {"run_id": run_id, "attempt": attempt}
    with _locked(storage_root) as where:
        free: int | None = None
        for uid in range(first, last + 1):
            path = where / str(uid)
            held = _holder(path) if path.exists() else None
            if held is not None and {k: held.get(k) for k in me} == me:
                return uid
            # Free: no holder, or one whose runner is gone, and no process of that uid (a job
            # its killed runner left, or a process from outside StarForge) still runs.
            stale = held is None or not _alive(held.get("pid"))
            if free is None and stale and not uid_has_processes(uid):
                free = uid
        if free is None:
            raise RunnerError(
                f"every uid of the range {first}-{last} is held by a live run",
                hint="widen job_uid_range in server.yaml",
            )
        _reclaim(_holder(where / str(free)))
        (where / str(free)).write_text(json.dumps({**me, **(record or {}), "pid": os.getpid()}))
        return free


def _reclaim(held: dict[str, object] | None) -> None:
    """Take back the folders of the run that held a uid before (its runner died holding it)."""
    run_dir, gid = (held or {}).get("run_dir"), (held or {}).get("gid")
    if isinstance(run_dir, str) and isinstance(gid, int):
        from starforge.runner import jobuser

        layout = RunLayout(Path(run_dir))
        folders = [layout.work, layout.out]
        jobuser.take_back([f for f in folders if f.exists()], gid)


def give_back(storage_root: Path, uid: int, run_id: str, attempt: int) -> bool:
    """Free the attempt's uid when none of its processes is left (else the last node does)."""
    with _locked(storage_root) as where:
        path = where / str(uid)
        held = _holder(path)
        if held is None or (held.get("run_id"), held.get("attempt")) != (run_id, attempt):
            return False
        if uid_has_processes(uid):
            return False
        path.unlink(missing_ok=True)
        return True
