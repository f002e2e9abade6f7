"""Users, roles and API tokens on the wire (``/api/v1/users``, ``/api/v1/tokens``).

Roles are ordered: each one may do what the ones before it may.

- ``viewer`` reads (its own runs, the cluster, its quota);
- ``member`` also submits and acts on its own runs;
- ``operator`` also reads and acts on anyone's runs and sees the whole queue;
- ``admin`` also manages users, quotas, registries and lab-wide settings.

A token is shown once, in :class:`TokenCreated`; afterwards only its name and dates are seen.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import Field

from starforge.contract.base import Contract
from starforge.contract.names import SAFE_SEGMENT

MAX_TOKEN_DAYS = 3650
# A Unix account name as useradd takes it (POSIX portable, 32 characters at most): the account a
# member's jobs run under on a Slurm server (`sf admin user set-unix NAME UNIXUSER`).
UNIX_USER_PATTERN = r"^[a-z_][a-z0-9_-]{0,30}[a-z0-9_$-]?$"


class Role(StrEnum):
    VIEWER = "viewer"  # reads
    MEMBER = "member"  # submits and acts on its own runs
    OPERATOR = "operator"  # acts on anyone's runs, sees the whole queue
    ADMIN = "admin"  # also users, quotas, registries, lab-wide settings

    @property
    def rank(self) -> int:
        return list(Role).index(self)

    def at_least(self, other: Role) -> bool:
        return self.rank >= other.rank


class TokenView(Contract):
    id: int
    name: str
    created_at: datetime
    expires_at: datetime | None = None
    last_used_at: datetime | None = None
    revoked_at: datetime | None = None
    scope: str = "api"  # "console": a console link's token, which only reads


class TokenList(Contract):
    user: str
    tokens: list[TokenView]


class TokenCreate(Contract):
    name: str | None = Field(default=None, pattern=SAFE_SEGMENT.pattern, max_length=100)
    expires_days: int | None = Field(default=None, ge=1, le=MAX_TOKEN_DAYS)


class TokenCreated(Contract):
    """The one answer that carries a token in clear: keep it, it is not shown again."""

    user: str
    token: str
    info: TokenView


class UserView(Contract):
    name: str
    role: Role
    disabled: bool = False
    created_at: datetime
    tokens: int = 0  # live (unrevoked, unexpired) tokens
    unix_user: str | None = None  # the Unix account its jobs run under on Slurm; None: unmapped


class UserList(Contract):
    users: list[UserView]


class UserCreate(Contract):
    name: str = Field(pattern=SAFE_SEGMENT.pattern, max_length=100)
    role: Role = Role.MEMBER
    unix_user: str | None = Field(default=None, pattern=UNIX_USER_PATTERN)


class RoleUpdate(Contract):
    role: Role


class UnixUserUpdate(Contract):
    """The Unix account a user's jobs run under on Slurm; None unmaps it."""

    unix_user: str | None = Field(pattern=UNIX_USER_PATTERN)


class UserCreated(Contract):
    user: UserView
    token: str  # the new user's first token, shown once
