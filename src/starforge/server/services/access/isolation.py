"""Whether a submission may run here: a server that cannot wall jobs off from each other runs
one user's jobs only.

A root server gives each attempt a uid of its own (``Settings.job_uids``); any other server (not
root, its storage under a closed folder, or a named ``job_user`` that every job shares) runs
every job under one identity, where one member's job could read, signal or rewrite another's.
With more than one enabled user such a server refuses every run but an admin's, unless its admin
opted out with ``isolation: none`` in ``server.yaml``. The single-user embedded default runs its
one user's jobs and says in ``sf server status`` that they are not isolated.

On Slurm a uid must exist on every node, so a root server runs each member's jobs as the
member's own Unix account (``users.unix_user``, mapped by an admin: ``sf admin user set-unix``):
:func:`job_account` names it in the run's bindings and the Slurm executor submits as it. With
more than one enabled user a member without an account is refused at submit, naming the fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Label, bindparam, func, select
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from starforge.contract.errors import Rejected
from starforge.server.db.models import User
from starforge.server.runtime import Runtime
from starforge.server.settings import Settings

# The account of a member whose mapping an admin removed after the run was admitted: never the
# server's own (root); the runner (root under Slurm) starts the job as this one instead.
UNMAPPED_FALLBACK = "nobody"


def _users(conn: Session | Connection) -> int:
    found = conn.scalar(select(func.count()).select_from(User).where(User.disabled.is_(False)))
    return found or 0


_USERS = User.__table__.c


def _of_user(column: Any) -> Label[Any]:
    return (
        select(column).where(_USERS.name == bindparam("user")).scalar_subquery().label(column.name)
    )


# What the refusal judges, as columns of one SELECT without a FROM (a submit adds its other
# reads to it): the user's role and Unix account (NULL for no such user) and the enabled users.
STANDING: tuple[Label[Any], ...] = (
    _of_user(_USERS.role),
    _of_user(_USERS.unix_user),
    select(func.count()).where(_USERS.disabled.is_(False)).scalar_subquery().label("enabled_users"),
)
_STANDING = select(*STANDING)


@dataclass(frozen=True)
class Standing:
    """What :func:`require_separation` judges of a user (the columns of :data:`STANDING`)."""

    role: str | None  # None: no such user
    unix_user: str | None
    enabled_users: int

    @classmethod
    def of(cls, row: Any) -> Standing:
        return cls(row.role, row.unix_user, int(row.enabled_users or 0))


def judged(settings: Settings) -> bool:
    """Whether :func:`require_separation` reads anything on this server."""
    return settings.isolation != "none" and (settings.slurm_accounts or not settings.job_uids)


def require_separation(
    rt: Runtime, conn: Session | Connection, user: str, standing: Standing | None = None
) -> None:
    """Refuse ``user``'s run on a server that cannot keep it apart from other users' jobs;
    ``standing``: the user's, read already with the caller's other reads (else read here, in
    one statement)."""
    settings = rt.settings
    if not judged(settings):
        return
    if standing is None:
        standing = Standing.of(conn.execute(_STANDING, {"user": user}).one())
    if settings.slurm_accounts:
        _require_account(standing, user)
        return
    if standing.enabled_users <= 1 or standing.role == "admin":
        return
    _, why = settings.job_isolation()
    hint = (
        "its admin runs it as root with storage_root where every user may enter (each run "
        "then gets a uid of its own), or opts out with `isolation: none` in server.yaml"
    )
    if settings.executor == "slurm":
        hint = (
            "its admin runs it as root (it then submits each member's jobs as the member's "
            "Unix account: `sf admin user set-unix NAME UNIXUSER`), or opts out with "
            "`isolation: none` in server.yaml"
        )
    raise Rejected(
        f"this server cannot keep one user's jobs apart from another's ({why}), so it runs "
        "no member's job",
        hint=hint,
        details={"isolation": why},
    )


def _require_account(standing: Standing, user: str) -> None:
    """On a root Slurm server of several users, a member's jobs need their Unix account (an
    admin's unmapped jobs run as the server's user, as on any server)."""
    if (
        standing.role is None
        or standing.unix_user
        or standing.role == "admin"
        or standing.enabled_users <= 1
    ):
        return
    raise Rejected(
        f"{user} has no Unix account on this Slurm server: a member's jobs run as their own "
        "account, so that no job can read, signal or change another member's",
        hint=f"an admin maps it: `sf admin user set-unix {user} UNIXUSER` (an account that "
        "exists on the login and compute nodes), then submit again",
        details={"user": user, "missing": "unix_user"},
    )


def job_account(rt: Runtime, session: Session, user: str) -> str | None:
    """The Unix account ``user``'s attempt runs as on a root Slurm server (its bindings'
    ``job_user``; the executor submits as it); None where the server's rule applies (not Slurm,
    not root, or an admin or the only user without one)."""
    if not rt.settings.slurm_accounts:
        return None
    row = session.execute(select(User.role, User.unix_user).where(User.name == user)).first()
    if row is None:
        return None
    if row.unix_user:
        return str(row.unix_user)
    if row.role == "admin" or _users(session) <= 1 or rt.settings.isolation == "none":
        return None
    return UNMAPPED_FALLBACK  # unmapped after admission: never as root
