"""Users, their roles and their bearer tokens.

Only the sha256 of a token is stored; a token is checked by hashing what the caller sent and
comparing in constant time. The embedded server has one local user whose token lives in
``<home>/server/local-token`` (mode 0600), created on first start and re-registered on each start.
A user's role is ``user`` unless it is ``admin`` (the embedded server's local user is the admin);
only admins list or change other users' quotas.
"""

from __future__ import annotations

import getpass
import hashlib
import hmac
import os
import secrets
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from starforge.contract.errors import Forbidden, Unauthorized, UserNotFound
from starforge.contract.names import SAFE_SEGMENT
from starforge.server.db.models import User

ADMIN = "admin"


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


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


def ensure_user(session: Session, name: str, token: str) -> User:
    """Create ``name`` or set its token; idempotent."""
    user = session.scalars(select(User).where(User.name == name)).one_or_none()
    digest = token_digest(token)
    if user is None:
        user = User(name=name, token_sha256=digest)
        session.add(user)
    elif user.token_sha256 != digest:
        user.token_sha256 = digest
    return user


def authenticate(session: Session, authorization: str | None) -> str:
    """The user name behind an ``Authorization: Bearer <token>`` header, or Unauthorized."""
    hint = "log in again (`sf login`), or restart the local server to renew its token"
    if not authorization:
        raise Unauthorized("this endpoint needs an Authorization: Bearer <token> header", hint=hint)
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise Unauthorized("the Authorization header must be 'Bearer <token>'", hint=hint)
    digest = token_digest(token)
    user = session.scalars(select(User).where(User.token_sha256 == digest)).first()
    if user is None or not hmac.compare_digest(user.token_sha256, digest):
        raise Unauthorized("the token is not valid", hint=hint)
    return user.name


def role_of(session: Session, user: str) -> str:
    return session.scalar(select(User.role).where(User.name == user)) or "user"


def require_admin(session: Session, user: str) -> None:
    if role_of(session, user) != ADMIN:
        raise Forbidden(
            f"only admins may change or list quotas; {user} is not an admin",
            hint="`sf status` shows your own quota and usage",
        )


def make_admin(session: Session, user: str) -> None:
    """Give ``user`` the admin role (the embedded server's local user is the admin)."""
    row = session.scalars(select(User).where(User.name == user)).one_or_none()
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
