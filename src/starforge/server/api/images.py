"""Admin routes for images: framework defaults, the registry allowlist and registry logins
(admins only), and the runner's fetch of its image's registry login (its run token only). No
route returns a password except the runner's (``services/data/registries.for_runner``)."""

from __future__ import annotations

from fastapi import APIRouter, Response

from starforge.contract.images import ImageAdmin, ImageDefaultUpdate, RegistryUpdate
from starforge.contract.registries import (
    RegistryLoginInfo,
    RegistryLoginList,
    RegistryLoginSet,
    RegistryLogout,
    RunRegistryAuth,
    RunRegistryAuthRequest,
)
from starforge.server.api.authz import (
    ListsRegistryLogins,
    ReadsImageSettings,
    RemovesRegistryLogin,
    SetsImageDefault,
    SetsRegistry,
    SetsRegistryLogin,
    runner,
)
from starforge.server.api.deps import RuntimeDep, RunToken
from starforge.server.services.data import images, registries
from starforge.server.services.runs import lifecycle as run_lifecycle

router = APIRouter()


@router.get("/admin/images", response_model=ImageAdmin)
def image_settings(rt: RuntimeDep, _: ReadsImageSettings) -> ImageAdmin:
    with rt.transaction() as session:
        return images.admin_view(session, rt.settings)


@router.put("/admin/images/defaults/{framework}", response_model=ImageAdmin)
def set_image_default(
    framework: str, body: ImageDefaultUpdate, rt: RuntimeDep, user: SetsImageDefault
) -> ImageAdmin:
    with rt.transaction() as session:
        images.set_default(session, framework, body.ref, user.name)
    with rt.transaction() as session:
        return images.admin_view(session, rt.settings)


@router.put("/admin/registries", response_model=ImageAdmin)
def update_registry(body: RegistryUpdate, rt: RuntimeDep, user: SetsRegistry) -> ImageAdmin:
    with rt.transaction() as session:
        if body.allowed:
            images.allow(session, body.entry, user.name)
        else:
            images.deny(session, rt.settings, body.entry)
    with rt.transaction() as session:
        return images.admin_view(session, rt.settings)


@router.get("/admin/registry-logins", response_model=RegistryLoginList)
def registry_logins(rt: RuntimeDep, _: ListsRegistryLogins) -> RegistryLoginList:
    with rt.transaction() as session:
        return registries.listing(session)


@router.put("/admin/registry-logins/{host}", response_model=RegistryLoginInfo)
def registry_login(
    host: str, body: RegistryLoginSet, rt: RuntimeDep, user: SetsRegistryLogin
) -> RegistryLoginInfo:
    with rt.transaction() as session:
        return registries.put(rt, session, user.name, host, body)


@router.delete("/admin/registry-logins/{host}", response_model=RegistryLogout)
def registry_logout(host: str, rt: RuntimeDep, _: RemovesRegistryLogin) -> RegistryLogout:
    with rt.transaction() as session:
        return registries.remove(session, host)


@router.post(
    "/runs/{run_id}/registry-auth",
    response_model=RunRegistryAuth,
    dependencies=[runner(run_lifecycle.authorize)],  # the runner's token, checked by the gate
)
def run_registry_auth(
    run_id: str,
    body: RunRegistryAuthRequest,
    rt: RuntimeDep,
    response: Response,
    token: RunToken = None,
) -> RunRegistryAuth:
    response.headers["Cache-Control"] = "no-store"
    return registries.for_runner(rt, run_id, token, body.attempt)
