"""Users, their roles and their API tokens.

A user has a role (:class:`~starforge.contract.auth.Role`: viewer < member < operator < admin),
may be disabled, and holds any number of API tokens. Only a token's sha256 is stored; a token is
checked by hashing what the caller sent and looking the digest up (a unique index), then comparing
in constant time. A token is refused once revoked, once expired, or while its user is disabled.

The calling user travels through the services as a :class:`Caller`: a typed value (name, role,
whether a console link signed it in) that the routes' authorization (``api/authz.py``) builds
from a token and services receive. A service that only stores or records a name takes
``caller.name``; one that decides what the caller may see takes the :class:`Caller` itself, so a
bare name can never stand in for one. :func:`sees_all`, :func:`may_see` and :func:`visible_runs`
are the one place that decides whose runs a caller may see: an operator or an admin sees
everyone's; anyone else sees only their own, and another user's run is answered as if it did not
exist (404, no existence leak). Which role an action needs is the route's rule alone: services
check no role again.

The embedded server has one local user, an admin, whose token lives in
``<home>/server/local-token`` (mode 0600), created on first start and re-registered on each start.
"""

from __future__ import annotations

import getpass
import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import ColumnElement, Row, Update, bindparam, select, true, update
from sqlalchemy.orm import Session

from starforge.contract.auth import Role
from starforge.contract.errors import Unauthorized, UserNotFound
from starforge.contract.names import SAFE_SEGMENT
from starforge.server.db.engine import read_only
from starforge.server.db.models import Run, Token, User, utcnow

if TYPE_CHECKING:
    from starforge.server.runtime import Runtime

ADMIN = Role.ADMIN.value
LOCAL_TOKEN_NAME = "local"
# last_used_at is written at most this often per token, so reads stay free of writes.
LAST_USED_EVERY = timedelta(minutes=5)


CONSOLE_SCOPE = "console"  # a token that only reads: what `sf job console` signs a browser in with


@dataclass(frozen=True, slots=True)
class Caller:
    """Who calls: a user's name and role (see the module docstring)."""

    name: str
    role: Role
    console_only: bool = False  # signed in by a console link's token: it may only read

    def __str__(self) -> str:
        return self.name  # what a message or an event names the caller by


def sees_all(caller: Caller) -> bool:
    """Whether ``caller`` may see and act on everyone's runs (an operator or an admin)."""
    return caller.role.at_least(Role.OPERATOR)


def may_see(caller: Caller, owner: str) -> bool:
    return owner == caller.name or sees_all(caller)


def visible_runs(caller: Caller) -> ColumnElement[bool]:
    """The ``WHERE`` clause of the runs ``caller`` may see."""
    return true() if sees_all(caller) else Run.user == caller.name


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> str:
    return "sf_" + secrets.token_urlsafe(32)


def local_user_name() -> str:
    """The OS user name when it is a safe path segment, else ``local``."""
    try:
        name = getpass.getuser()
    except (KeyError, OSError):
        return "local"
    return name if SAFE_SEGMENT.match(name) else "local"


def load_or_create_token(path: Path) -> str:
    """The token stored at ``path``; a new random one is written there (0600) if it is absent."""
    if path.exists():
        token = path.read_text(encoding="utf-8").strip()
        if token:
            return token
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    # O_EXCL: if two servers race on first start, one of them fails loudly instead of both
    # writing different tokens.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(token + "\n")
    return token


def find(session: Session, name: str) -> User | None:
    return session.scalars(select(User).where(User.name == name)).one_or_none()


def add_token(
    session: Session,
    user: User,
    token: str,
    name: str,
    expires_at: datetime | None = None,
    *,
    scope: str = "api",
) -> Token:
    row = Token(
        owner=user, name=name, sha256=token_digest(token), expires_at=expires_at, scope=scope
    )
    session.add(row)
    session.flush()
    return row


def ensure_user(
    session: Session, name: str, token: str, *, token_name: str = LOCAL_TOKEN_NAME
) -> User:
    """Create ``name`` (a member) or keep it; make ``token`` its live token named ``token_name``
    (an older token of that name is revoked). Idempotent."""
    user = find(session, name)
    if user is None:
        user = User(name=name, role=Role.MEMBER.value)
        session.add(user)
        session.flush()
    digest = token_digest(token)
    if session.scalar(select(Token.id).where(Token.sha256 == digest)) is not None:
        return user
    for old in user.tokens:
        if old.name == token_name:
            session.delete(old)  # a renewed local token replaces the old one under its name
    session.flush()
    add_token(session, user, token, token_name)
    return user


def _refuse(hint: str, message: str) -> Unauthorized:
    return Unauthorized(message, hint=hint)


_BY_DIGEST = (
    select(
        Token.id,
        Token.sha256,
        Token.revoked_at,
        Token.expires_at,
        Token.last_used_at,
        Token.scope,
        User.name,
        User.role,
        User.disabled,
    )
    .join(User, User.id == Token.user_id)
    .where(Token.sha256 == bindparam("digest"))
)
_LOGIN_HINT = "log in again (`sf login`), or restart the local server to renew its token"


def _digest_of(authorization: str | None) -> str:
    if not authorization:
        raise _refuse(_LOGIN_HINT, "this endpoint needs an Authorization: Bearer <token> header")
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise _refuse(_LOGIN_HINT, "the Authorization header must be 'Bearer <token>'")
    return token_digest(token)


def require_bearer(authorization: str | None) -> None:
    """Unauthorized unless ``authorization`` is a well-formed bearer token (valid or not: that
    takes :func:`authenticate`)."""
    _digest_of(authorization)


def _caller(row: Row[Any] | None, digest: str, now: datetime) -> Caller:
    """The caller a token's row (:data:`_BY_DIGEST`) names, or Unauthorized."""
    if row is None or not hmac.compare_digest(row.sha256, digest):
        raise _refuse(_LOGIN_HINT, "the token is not valid")
    if row.revoked_at is not None:
        raise _refuse("ask for a new token (`sf token create`)", "the token was revoked")
    if row.expires_at is not None and row.expires_at <= now:
        raise _refuse("ask for a new token (`sf token create`)", "the token has expired")
    if row.disabled:
        raise _refuse("ask an admin to enable your account", f"user {row.name} is disabled")
    return Caller(row.name, Role(row.role), console_only=row.scope == CONSOLE_SCOPE)


def _used_now(row: Row[Any], now: datetime) -> Update | None:
    """The write that records a token's use, at most once per :data:`LAST_USED_EVERY`."""
    if row.last_used_at is not None and now - row.last_used_at < LAST_USED_EVERY:
        return None
    return update(Token).where(Token.id == row.id).values(last_used_at=now)


def authenticate(session: Session, authorization: str | None) -> Caller:
    """The user behind an ``Authorization: Bearer <token>`` header, or Unauthorized."""
    digest = _digest_of(authorization)
    row = session.execute(_BY_DIGEST, {"digest": digest}).one_or_none()
    now = utcnow()
    caller = _caller(row, digest, now)
    assert row is not None
    if (touch := _used_now(row, now)) is not None:
        session.execute(touch)
    return caller


def authenticate_request(rt: Runtime, authorization: str | None) -> Caller:
    """:func:`authenticate` for a request: the token and its user in one read that takes no
    write lock (a revocation committed before the request began is always seen), and a write
    transaction only when the token's last use is due to be recorded."""
    digest = _digest_of(authorization)
    with read_only(rt.engine) as conn:
        row = conn.execute(_BY_DIGEST, {"digest": digest}).one_or_none()
    now = utcnow()
    caller = _caller(row, digest, now)
    assert row is not None
    if (touch := _used_now(row, now)) is not None:
        with rt.transaction() as session:
            session.execute(touch)
    return caller


def role_of(session: Session, user: str) -> str:
    return session.scalar(select(User.role).where(User.name == user)) or Role.MEMBER.value


def make_admin(session: Session, user: str) -> None:
    """Give ``user`` the admin role (the embedded server's local user is the admin)."""
    row = find(session, user)
    if row is not None and row.role != ADMIN:
        row.role = ADMIN


def require_known(session: Session, user: str) -> None:
    """Raise :class:`UserNotFound` (naming some known users) unless ``user`` exists."""
    if session.scalar(select(User.id).where(User.name == user)) is None:
        names = list(session.scalars(select(User.name).order_by(User.name).limit(20)))
        raise UserNotFound(
            f"no user {user!r}",
            hint=f"known users: {', '.join(names) or '(none)'}",
            details={"user": user},
        )
