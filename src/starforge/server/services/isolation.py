"""Whether a submission may run here: a server that cannot wall jobs off from each other runs
one user's jobs only.

A root server gives each attempt a uid of its own (``Settings.job_uids``); any other server (not
root, its storage under a closed folder, or a named ``job_user`` that every job shares) runs
every job under one identity, where one member's job could read, signal or rewrite another's.
With more than one enabled user such a server refuses every run but an admin's, unless its admin
opted out with ``isolation: none`` in ``server.yaml``. The single-user embedded default runs its
one user's jobs and says in ``sf server status`` that they are not isolated.
"""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from starforge.contract.errors import Rejected
from starforge.server.db.models import User
from starforge.server.runtime import Runtime


def require_separation(rt: Runtime, conn: Session | Connection, user: str) -> None:
    """Refuse ``user``'s run on a server that cannot keep it apart from other users' jobs."""
    settings = rt.settings
    if settings.job_uids or settings.isolation == "none":
        return
    users = conn.scalar(select(func.count()).select_from(User).where(User.disabled.is_(False)))
    role = conn.scalar(select(User.role).where(User.name == user))
    if (users or 0) <= 1 or role == "admin":
        return
    _, why = settings.job_isolation()
    raise Rejected(
        f"this server cannot keep one user's jobs apart from another's ({why}), so it runs "
        "no member's job",
        hint="its admin runs it as root with storage_root where every user may enter (each run "
        "then gets a uid of its own), or opts out with `isolation: none` in server.yaml",
        details={"isolation": why},
    )
