"""Request dependencies: the runtime, the calling user, the client-version gate.

The runtime and the version gate do no I/O, so they are coroutines: FastAPI runs a plain
function dependency in its thread pool, one hand-over to a worker thread and back per
dependency and request, for what is a dictionary lookup here."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Request

from starforge import __version__
from starforge.contract import versions
from starforge.contract.api import CLIENT_VERSION_HEADER, MIN_CLIENT_VERSION, RUN_TOKEN_HEADER
from starforge.contract.errors import ClientTooOld, InvalidSpec
from starforge.server.runtime import Runtime
from starforge.server.services.access import users


async def get_runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
# A runner route's run token (its gate, ``authz.runner``, has checked it before the body is read).
RunToken = Annotated[str | None, Header(alias=RUN_TOKEN_HEADER)]


def current_user(
    rt: RuntimeDep, authorization: Annotated[str | None, Header()] = None
) -> users.Caller:
    """The calling user, with no rule: routes declare theirs with ``authz.authorize``."""
    return users.authenticate_request(rt, authorization)


UserDep = Annotated[users.Caller, Depends(current_user)]


MAX_CLIENT_HEADER = 64  # "0.12.3rc1+local.build"; far more than any version needs


def check_client(client: str | None, minimum: str = MIN_CLIENT_VERSION) -> None:
    """400 for a client-version header no client sends (too long); 426 to a client older than
    ``minimum``, the oldest this server speaks to (``min_client_version`` for users' calls).
    Pure: the gate calls it before any I/O. The 426 is one line naming the upgrade command, no
    hint: every client since the first prints an error body's message as its one red line."""
    if not client:
        return
    if len(client) > MAX_CLIENT_HEADER:
        raise InvalidSpec(
            f"the {CLIENT_VERSION_HEADER} header is {len(client)} characters long; it must be "
            f"a version such as {MIN_CLIENT_VERSION} ({MAX_CLIENT_HEADER} characters at most)",
            hint="send the client's version, or leave the header out",
            details={"header": CLIENT_VERSION_HEADER, "length": len(client)},
        )
    if versions.older(client, minimum):
        raise ClientTooOld(
            f"client {client} is older than {minimum}, the oldest this server ({__version__}) "
            f"accepts: upgrade it with pip install -U 'starforge>={minimum}'",
            details={"client": client, "min_client": minimum, "server": __version__},
        )


async def check_client_version(
    client: Annotated[str | None, Header(alias=CLIENT_VERSION_HEADER)] = None,
) -> None:
    """Answer 426 to a client older than the oldest this server can speak to at all
    (:func:`check_client`); the gate holds users' calls to the admin's minimum as well."""
    check_client(client)
