"""Health, server info, who am I, and the profile registry."""

from __future__ import annotations

import os

from fastapi import APIRouter

from starforge import __version__
from starforge.contract.api import ProfilesResponse, ServerInfo, WhoAmI
from starforge.server.api.authz import PUBLIC, Reader, ReadSelf, authorize
from starforge.server.api.deps import RuntimeDep
from starforge.server.containers import describe as describe_containers
from starforge.server.db.engine import describe_url
from starforge.server.services.data import images
from starforge.server.settings import Settings

router = APIRouter()


@router.get("/health", dependencies=[authorize(PUBLIC)])
def health() -> dict[str, bool]:
    return {"ok": True}


@router.get("/info", response_model=ServerInfo, dependencies=[authorize(PUBLIC)])
def info(rt: RuntimeDep) -> ServerInfo:
    job_user, _ = rt.settings.job_isolation()
    return ServerInfo(
        version=__version__,
        started_at=rt.started_at,
        pid=os.getpid(),
        executor=rt.settings.executor,
        url=rt.url,
        job_user=job_user,
        isolation=isolation_line(rt.settings),
        database=describe_url(rt.settings.db_url),
        leader=rt.leader,
        registries=_registries(rt),
        containers=describe_containers(rt.settings.containers),
        min_client=rt.settings.min_client_version,
    )


def isolation_line(settings: Settings) -> str:
    """How this server keeps jobs apart, in the one line ``sf server status`` shows: who jobs
    run as, and what happens to members' runs where it cannot separate them (the rule of
    ``services/access/isolation.py``). Said as a rule, not as today's count of users: this route
    answers without a token, and the rule holds from the second user on."""
    who, unseparated = settings.job_isolation()
    opted_out = settings.isolation == "none"
    if settings.slurm_accounts:
        unmapped = (
            "a member without one runs unseparated (isolation: none)"
            if opted_out
            else "with more than one user, a member without one is refused at submit"
        )
        return f"jobs run as {who}; {unmapped}"
    if not unseparated:
        return f"runs are walled off: {who}; no job reads, signals or changes another's"
    if opted_out:
        return f"{unseparated}; members' jobs are not separated from each other (isolation: none)"
    return (
        f"{unseparated}; with more than one user, members' runs are refused unless server.yaml "
        "says `isolation: none`"
    )


def _registries(rt: RuntimeDep) -> str:
    """The allowlist in a line; counted, not named (this route answers without a token)."""
    with rt.transaction() as session:
        entries = images.allowlist(session, rt.settings)
    if not entries:
        return images.allowlist_summary(entries)
    noun = "registry" if len(entries) == 1 else "registries"
    return f"{len(entries)} allowed {noun} (`sf admin registry ls`); others are refused"


@router.get("/whoami", response_model=WhoAmI)
def whoami(user: ReadSelf) -> WhoAmI:
    return WhoAmI(user=user.name, role=user.role.value)


@router.get("/profiles", response_model=ProfilesResponse)
def profiles(rt: RuntimeDep, _: Reader) -> ProfilesResponse:
    return ProfilesResponse(profiles=rt.settings.profiles, hf_offline=rt.settings.hf_offline)
