"""Health, server info, who am I, and the profile registry."""

from __future__ import annotations

import os

from fastapi import APIRouter

from starforge import __version__
from starforge.contract.api import ProfilesResponse, ServerInfo, WhoAmI
from starforge.server.api.deps import RuntimeDep, UserDep
from starforge.server.db.engine import describe_url

router = APIRouter()


@router.get("/health")
def health() -> dict[str, bool]:
    return {"ok": True}


@router.get("/info", response_model=ServerInfo)
def info(rt: RuntimeDep) -> ServerInfo:
    return ServerInfo(
        version=__version__,
        started_at=rt.started_at,
        pid=os.getpid(),
        executor=rt.settings.executor,
        url=rt.url,
        database=describe_url(rt.settings.db_url),
        leader=rt.leader,
    )


@router.get("/whoami", response_model=WhoAmI)
def whoami(user: UserDep) -> WhoAmI:
    return WhoAmI(user=user)


@router.get("/profiles", response_model=ProfilesResponse)
def profiles(rt: RuntimeDep, _: UserDep) -> ProfilesResponse:
    return ProfilesResponse(profiles=rt.settings.profiles, hf_offline=rt.settings.hf_offline)
