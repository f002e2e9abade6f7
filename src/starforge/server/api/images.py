"""Admin routes for images: framework defaults and the registry allowlist (admins only)."""

from __future__ import annotations

from fastapi import APIRouter

from starforge.contract.images import ImageAdmin, ImageDefaultUpdate, RegistryUpdate
from starforge.server.api.authz import Admin
from starforge.server.api.deps import RuntimeDep
from starforge.server.services import images

router = APIRouter()


@router.get("/admin/images", response_model=ImageAdmin)
def image_settings(rt: RuntimeDep, _: Admin) -> ImageAdmin:
    with rt.transaction() as session:
        return images.admin_view(session, rt.settings)


@router.put("/admin/images/defaults/{framework}", response_model=ImageAdmin)
def set_image_default(
    framework: str, body: ImageDefaultUpdate, rt: RuntimeDep, user: Admin
) -> ImageAdmin:
    with rt.transaction() as session:
        images.set_default(session, framework, body.ref, str(user))
    with rt.transaction() as session:
        return images.admin_view(session, rt.settings)


@router.put("/admin/registries", response_model=ImageAdmin)
def update_registry(body: RegistryUpdate, rt: RuntimeDep, user: Admin) -> ImageAdmin:
    with rt.transaction() as session:
        if body.allowed:
            images.allow(session, body.entry, str(user))
        else:
            images.deny(session, rt.settings, body.entry)
    with rt.transaction() as session:
        return images.admin_view(session, rt.settings)
