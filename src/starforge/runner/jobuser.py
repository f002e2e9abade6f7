"""The user a job runs as, and the folders handed to it.

The server names the job's user in the binding (``job_user``; empty: the runner's own). When it
names another user, the runner must be root (only root can switch users); it then gives that user
the run's ``work`` and ``out`` folders and the shared Hugging Face cache, locks the run's
``state`` folder (bindings with the runner's token, runner and exit records) to itself, and
starts the job with that user's uid and gid and no supplementary groups; when the job has exited
it takes ``work`` and ``out`` back. So a job writes only under its own run (and the runs of the
same user that are running at the same time: one job user is one uid), and reads neither the
platform's files nor another run's binding.
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starforge.contract.errors import RunnerError
from starforge.contract.layout import RunLayout


@dataclass(frozen=True)
class JobUser:
    name: str
    uid: int
    gid: int

    def popen_kwargs(self) -> dict[str, Any]:
        """What ``subprocess.Popen`` needs to start the job as this user, with no other groups."""
        return {"user": self.uid, "group": self.gid, "extra_groups": []}

    def env(self, home: str) -> dict[str, str]:
        # The runner's HOME (root's) is not the job's: tools that write to ~ write into its run.
        return {"HOME": home, "USER": self.name, "LOGNAME": self.name}


def dynamic(uid: int, gid: int) -> JobUser:
    """A per-run uid (no passwd entry) in its member's group."""
    return JobUser(name=f"sf-{uid}", uid=uid, gid=gid)


def resolve(name: str) -> JobUser | None:
    """The user to switch to, or None when the job runs as the runner's own user."""
    if not name:
        return None
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise RunnerError(
            f"the job user {name!r} does not exist on this node",
            hint="create it, or set job_user in the server's server.yaml",
        ) from None
    if entry.pw_uid == os.geteuid():
        return None
    if os.geteuid() != 0:
        raise RunnerError(
            f"jobs are to run as {name!r}, but the runner is not root and cannot switch users",
            hint="run the server as root, or set job_user to '' in server.yaml "
            "(jobs then run as the server's user)",
        )
    return JobUser(name=name, uid=entry.pw_uid, gid=entry.pw_gid)


def submitted_as() -> JobUser:
    """The runner's own account, for a job submitted as its member's account (Slurm's
    ``sbatch --uid``): the runner is the job's user already and switches to no other."""
    entry = pwd.getpwuid(os.geteuid())
    return JobUser(name=entry.pw_name, uid=entry.pw_uid, gid=os.getegid())


def check_reachable(user: JobUser, path: Path) -> None:
    """Refuse, naming the folder, a run the job user could not even enter (a storage root
    under a 0700 home such as /root): a clear startup failure instead of a failed exec."""
    for folder in [*reversed(path.parents), path]:
        st = folder.stat()
        if st.st_uid == user.uid:
            ok = bool(st.st_mode & stat.S_IXUSR)
        elif st.st_gid == user.gid:
            ok = bool(st.st_mode & stat.S_IXGRP)
        else:
            ok = bool(st.st_mode & stat.S_IXOTH)
        if not ok:
            raise RunnerError(
                f"the job user {user.name!r} cannot enter {folder}, so it cannot reach its run",
                hint="put storage_root in a folder every user may traverse (e.g. /srv/starforge), "
                "or set job_user: '' in server.yaml to run jobs as the server's user",
                details={"folder": str(folder), "job_user": user.name},
            )


def _chown_tree(root: Path, user: JobUser) -> None:
    os.lchown(root, user.uid, user.gid)
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            os.lchown(os.path.join(folder, name), user.uid, user.gid)


def hand_over(
    user: JobUser,
    *,
    run_dir: Path,
    writable: list[Path],
    shared: list[Path],
    walled: bool = False,
) -> None:
    """Give ``user`` the folders it writes (``writable``, recursively; ``shared``, the folder
    only) and keep the run's ``state`` folder to the runner. ``walled`` (a per-run uid): the
    run's folders, and its member's folder of runs, are closed to everyone but the run's uid and
    its member's group (the member's later runs read its outputs: lineage)."""
    state = RunLayout(run_dir).state
    state.mkdir(parents=True, exist_ok=True)
    os.chmod(state, 0o700)  # the runner's token and records: not the job's to read
    if walled:
        member_runs = run_dir.parents[2]  # <root>/runs/<member>
        for folder in (member_runs, run_dir):
            os.chown(folder, 0, user.gid)
            os.chmod(folder, 0o750)
    for folder in writable:
        folder.mkdir(parents=True, exist_ok=True)
        _chown_tree(folder, user)
        if walled:
            os.chmod(folder, 0o750)
    for folder in shared:
        folder.mkdir(parents=True, exist_ok=True)
        os.lchown(folder, user.uid, user.gid)


def take_back(folders: list[Path], gid: int | None = None) -> None:
    """Give the run's folders back to the runner once its job has exited: the next job of the
    same user (another run) may not write into a finished run. ``gid``: the member's group keeps
    reading them (a per-run uid's outputs, for the member's later runs)."""
    me = JobUser(name="", uid=os.geteuid(), gid=os.getegid() if gid is None else gid)
    for folder in folders:
        if folder.exists():
            _chown_tree(folder, me)


def check_runnable(user: JobUser, program: str, path_env: str) -> None:
    """Refuse, naming the fix, a job whose program ``user`` could not run (a Python under
    root's 0700 home): a clear startup failure instead of a failed exec."""
    found = shutil.which(program, path=path_env) if "/" not in program else program
    if not found:
        return  # not found at all: the start itself says so
    real = Path(os.path.realpath(found))
    try:
        check_reachable(user, real.parent)
    except RunnerError as exc:
        raise RunnerError(
            f"the run's uid cannot run the job's program {found} ({exc.message})",
            hint="install the training Python where every user may enter (a venv made from "
            "/usr/bin/python3 under /opt/starforge, say: docs/deploy.md), or name a job_user",
            details={"program": found},
        ) from None
