"""Request dependencies: the runtime, the calling user, the client-version gate.

The runtime and the version gate do no I/O, so they are coroutines: FastAPI runs a plain
function dependency in its thread pool, one hand-over to a worker thread and back per
dependency and request, for what is a dictionary lookup here."""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import Depends, Header, Request

from starforge.contract.api import CLIENT_VERSION_HEADER, MIN_CLIENT_VERSION
from starforge.contract.errors import ClientTooOld, InvalidSpec
from starforge.server.runtime import Runtime
from starforge.server.services import users


async def get_runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


def current_user(rt: RuntimeDep, authorization: Annotated[str | None, Header()] = None) -> str:
    """The calling user, with no rule: routes declare theirs with ``authz.authorize``."""
    return users.authenticate_request(rt, authorization)


UserDep = Annotated[str, Depends(current_user)]


MAX_CLIENT_HEADER = 64  # "0.12.3rc1+local.build"; far more than any version needs
_VERSION = re.compile(r"^\s*v?(\d{1,9}(?:\.\d{1,9})*)(?!\d)")


def version_tuple(text: str) -> tuple[int, ...] | None:
    """``0.1.0``, ``0.1.0rc1`` or ``0.2`` as numbers; None when it is not a version at all (a
    part of ten digits or more is none: no release is numbered so)."""
    match = _VERSION.match(text)
    if not match:
        return None
    parts = tuple(int(p) for p in match.group(1).split("."))
    return parts + (0,) * (3 - len(parts)) if len(parts) < 3 else parts


def check_client(client: str | None) -> None:
    """400 for a client-version header no client sends (too long); 426 to a client older than
    the oldest this server speaks to. Pure: the auth middleware calls it before any I/O."""
    if not client:
        return
    if len(client) > MAX_CLIENT_HEADER:
        raise InvalidSpec(
            f"the {CLIENT_VERSION_HEADER} header is {len(client)} characters long; it must be "
            f"a version such as {MIN_CLIENT_VERSION} ({MAX_CLIENT_HEADER} characters at most)",
            hint="send the client's version, or leave the header out",
            details={"header": CLIENT_VERSION_HEADER, "length": len(client)},
        )
    have, need = version_tuple(client), version_tuple(MIN_CLIENT_VERSION)
    if have is not None and need is not None and have < need:
        raise ClientTooOld(
            f"client {client} is older than {MIN_CLIENT_VERSION}, the oldest this server accepts",
            hint="upgrade the client: pip install -U starforge",
            details={"client": client, "min_client": MIN_CLIENT_VERSION},
        )


async def check_client_version(
    client: Annotated[str | None, Header(alias=CLIENT_VERSION_HEADER)] = None,
) -> None:
    """Answer 426 to a client older than the oldest this server speaks to (:func:`check_client`)."""
    check_client(client)
