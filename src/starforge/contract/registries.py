"""Registry logins: the credentials an admin stores for an OCI registry host, and what crosses
the wire about them.

An admin stores one login per registry host (``sf admin registry login HOST``). The server uses it
in two places only: to ask the registry for a tag's digest at admission, and for the pull of a
run's image by its runner. No response model here carries a password except
:class:`RunRegistryAuth`, the answer to a run's own runner; the listing shows host, username and
dates.

:func:`auth_file` is the one shape of the auth file ``podman pull --authfile`` reads (the
containers-auth.json format: ``{"auths": {HOST: {"auth": base64(user:password)}}}``).
"""

from __future__ import annotations

import base64
import re
from datetime import datetime

from pydantic import Field

from starforge.contract.base import Contract
from starforge.contract.errors import ImageError

MAX_PASSWORD_CHARS = 16 << 10  # a token a registry hands out (nvcr.io's API keys are long)
_HOST = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9.-]*[a-zA-Z0-9])?(?::\d{1,5})?$")


def check_registry_host(host: str) -> str:
    """A registry host ``HOST[:PORT]`` as image references name it, lower case."""
    text = host.strip()
    if not _HOST.match(text):
        raise ImageError(
            f"{host!r} is not a registry host of the form HOST[:PORT]",
            hint="give the registry part of the image reference, e.g. nvcr.io, ghcr.io or "
            "127.0.0.1:5000 (no scheme, no path)",
            details={"host": host},
        )
    return text.lower()


class RegistryLoginSet(Contract):
    """``PUT /admin/registry-logins/{host}``: store (or replace) the host's login."""

    username: str = Field(min_length=1, max_length=256)
    password: str = Field(min_length=1, max_length=MAX_PASSWORD_CHARS)


class RegistryLoginInfo(Contract):
    host: str
    username: str
    set_by: str
    updated_at: datetime


class RegistryLoginList(Contract):
    logins: list[RegistryLoginInfo]


class RegistryLogout(Contract):
    host: str
    removed: bool  # False: there was no login for the host (not an error)


class RunRegistryAuthRequest(Contract):
    """The runner's ask for its image's registry login (``POST /runs/{id}/registry-auth``)."""

    attempt: int = Field(ge=1)
    node_rank: int = Field(default=0, ge=0)


class RunRegistryAuth(Contract):
    """The answer to a run's own runner: the login for its image's registry, if one is stored.

    ``tls_verify`` is False for a registry the server speaks plain HTTP to (a loopback address,
    or one of the server's ``insecure_registries``), so the pull speaks to it as admission did.
    ``withheld`` says why a stored login is not handed out (its runner runs as a member's account).
    """

    registry: str
    username: str = ""
    password: str = ""
    tls_verify: bool = True
    withheld: str = ""

    @property
    def has_login(self) -> bool:
        return bool(self.username and self.password)


def auth_file(registry: str, username: str, password: str) -> dict[str, object]:
    """The containers-auth.json of one login (what ``--authfile`` reads)."""
    token = base64.b64encode(f"{username}:{password}".encode()).decode()
    return {"auths": {registry: {"auth": token}}}
