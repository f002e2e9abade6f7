"""Managing users and tokens: what ``sf admin user …`` and ``sf token …`` ask the server.

Who may call each of these is the routes' rule (:mod:`starforge.server.api.authz`); this module
keeps the invariants of the data: a user name is unique; a new user gets one token, shown once;
a token belongs to the user who created it (a user lists and revokes only their own); the lab
always keeps at least one enabled admin, so it can never lock itself out.

A user's Unix account (``unix_user``, what a Slurm server submits its jobs as) exists on the
server's host when it is set, is not root, and is no other user's: two users on one account would
share their jobs' files.
"""

from __future__ import annotations

import pwd
import secrets
from datetime import timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from starforge.contract.auth import (
    Role,
    TokenCreate,
    TokenCreated,
    TokenList,
    TokenView,
    UserCreate,
    UserCreated,
    UserList,
    UserView,
)
from starforge.contract.errors import NotFound, UsageError
from starforge.server.db.models import Token, User, utcnow
from starforge.server.runtime import Runtime
from starforge.server.services.access import users


def _live(token: Token) -> bool:
    now = utcnow()
    return token.revoked_at is None and (token.expires_at is None or token.expires_at > now)


def _user_view(user: User) -> UserView:
    return UserView(
        name=user.name,
        role=Role(user.role),
        disabled=user.disabled,
        created_at=user.created_at,
        tokens=sum(1 for t in user.tokens if _live(t)),
        unix_user=user.unix_user,
    )


def _token_view(token: Token) -> TokenView:
    return TokenView.model_validate(token, from_attributes=True)  # the row's own fields


def _get(session: Session, name: str) -> User:
    users.require_known(session, name)
    found = users.find(session, name)
    assert found is not None
    return found


def _keep_an_admin(session: Session, user: User) -> None:
    """Refuse a change that would leave no enabled admin."""
    others = session.scalar(
        select(func.count()).where(
            User.role == Role.ADMIN.value, User.disabled.is_(False), User.id != user.id
        )
    )
    if user.role == Role.ADMIN.value and not user.disabled and not others:
        raise UsageError(
            f"{user.name} is the last enabled admin; the lab would have no admin left",
            hint="make another user an admin first: sf admin user set-role NAME admin",
        )


def list_users(rt: Runtime) -> UserList:
    with rt.transaction() as session:
        rows = session.scalars(select(User).order_by(User.name)).all()
        return UserList(users=[_user_view(u) for u in rows])


def add_user(rt: Runtime, body: UserCreate) -> UserCreated:
    token = users.new_token()
    with rt.transaction() as session:
        if users.find(session, body.name) is not None:
            raise UsageError(
                f"user {body.name!r} already exists",
                hint="pick another name; `sf admin user ls` lists the users",
            )
        if body.unix_user is not None:
            _check_unix_user(session, body.name, body.unix_user)
        user = User(name=body.name, role=body.role.value, unix_user=body.unix_user)
        session.add(user)
        session.flush()
        users.add_token(session, user, token, "default")
        return UserCreated(user=_user_view(user), token=token)


def set_role(rt: Runtime, name: str, role: Role) -> UserView:
    with rt.transaction() as session:
        user = _get(session, name)
        if role is not Role.ADMIN:
            _keep_an_admin(session, user)
        user.role = role.value
        return _user_view(user)


def set_disabled(rt: Runtime, name: str, disabled: bool) -> UserView:
    with rt.transaction() as session:
        user = _get(session, name)
        if disabled:
            _keep_an_admin(session, user)
        user.disabled = disabled
        return _user_view(user)


def set_unix_user(rt: Runtime, name: str, unix_user: str | None) -> UserView:
    """Map ``name``'s jobs to the Unix account ``unix_user`` (None: unmap). Runs placed from
    now on take it; a run already started keeps the account it was submitted as."""
    with rt.transaction() as session:
        user = _get(session, name)
        if unix_user is not None:
            _check_unix_user(session, name, unix_user)
        user.unix_user = unix_user
        return _user_view(user)


def _check_unix_user(session: Session, name: str, unix_user: str) -> None:
    try:
        entry = pwd.getpwnam(unix_user)
    except KeyError:
        raise UsageError(
            f"there is no Unix account {unix_user!r} on the server's host",
            hint="create it on the login node and every compute node (the same uid everywhere, "
            "e.g. from LDAP), then map it again",
            details={"unix_user": unix_user},
        ) from None
    if entry.pw_uid == 0:
        raise UsageError(
            f"{unix_user!r} is root: a user's jobs never run as root",
            hint="map the user to their own Unix account",
            details={"unix_user": unix_user},
        )
    taken = session.scalar(select(User.name).where(User.unix_user == unix_user, User.name != name))
    if taken is not None:
        raise UsageError(
            f"the Unix account {unix_user!r} is already {taken}'s: two users on one account "
            "could read and change each other's jobs",
            hint=f"map {name} to an account of their own, or unmap {taken} first: "
            f"sf admin user set-unix {taken} --unset",
            details={"unix_user": unix_user, "user": taken},
        )


def create_token(rt: Runtime, user: str, body: TokenCreate) -> TokenCreated:
    token = users.new_token()
    expires = utcnow() + timedelta(days=body.expires_days) if body.expires_days else None
    with rt.transaction() as session:
        owner = _get(session, user)
        taken = {t.name for t in owner.tokens}
        name = body.name or next(
            f"token-{i}" for i in range(1, len(taken) + 2) if f"token-{i}" not in taken
        )
        if name in taken:
            raise UsageError(
                f"you already have a token named {name!r}",
                hint="pick another --name, or revoke the old one: sf token revoke " + name,
            )
        row = users.add_token(session, owner, token, name, expires)
        return TokenCreated(user=owner.name, token=token, info=_token_view(row))


def create_console_token(rt: Runtime, user: str) -> TokenCreated:
    """A token for one browser sign-in: it only reads and expires after
    ``console_token_ttl_s``; the caller's expired console tokens are dropped meanwhile."""
    token = users.new_token()
    now = utcnow()
    with rt.transaction() as session:
        owner = _get(session, user)
        for old in [t for t in owner.tokens if t.scope == users.CONSOLE_SCOPE]:
            if old.expires_at is not None and old.expires_at <= now:
                session.delete(old)
        expires = now + timedelta(seconds=rt.settings.console_token_ttl_s)
        name = f"console-{secrets.token_hex(4)}"
        row = users.add_token(session, owner, token, name, expires, scope=users.CONSOLE_SCOPE)
        return TokenCreated(user=owner.name, token=token, info=_token_view(row))


def list_tokens(rt: Runtime, user: str) -> TokenList:
    with rt.transaction() as session:
        owner = _get(session, user)
        return TokenList(user=owner.name, tokens=[_token_view(t) for t in owner.tokens])


def revoke_token(rt: Runtime, user: str, ref: str) -> TokenView:
    """Revoke the caller's token named ``ref`` (or with id ``ref``); revoking twice is a no-op."""
    with rt.transaction() as session:
        owner = _get(session, user)
        found = [t for t in owner.tokens if t.name == ref or str(t.id) == ref]
        if not found:
            raise NotFound(
                f"you have no token {ref!r}",
                hint="`sf token ls` lists your tokens",
                details={"token": ref},
            )
        row = found[0]
        if row.revoked_at is None:
            row.revoked_at = utcnow()
        return _token_view(row)
