"""Images at admission: which image a run gets, whether its registry is allowed, and its digest.

:func:`admit_image` applies the resolution order (``contract.images.resolve_image``: ``--image``,
the admins' framework default, ``runtime_images`` in server.yaml, the catalog), then the
allowlist (the admins' entries plus ``allowed_registries``; none at all allows every registry),
then, where the server runs jobs in containers, pins the tag to the digest the registry serves
(``server/registry.py``, with the login an admin stored for a registry that asks for one), so a
retag never changes a queued or resumed run. With ``containers: none`` nothing is resolved and
the submission is told the image will not be used.
Also the admin side: framework defaults and allowlist entries, read and written here only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import Connection, literal, null, select, union_all
from sqlalchemy.orm import Session

from starforge.catalog.loader import Method
from starforge.contract.errors import Rejected, UsageError
from starforge.contract.images import (
    ImageAdmin,
    ImageSource,
    RegistryEntry,
    check_image,
    check_registry_entry,
    parse_image,
    registry_allowed,
    resolve_image,
)
from starforge.contract.jobspec import JobSpec
from starforge.server import containers, registry
from starforge.server.db.images import AllowedRegistry, ImageDefault
from starforge.server.registry_auth import LoginLookup
from starforge.server.settings import Settings

TAG_WARNING = "image {ref} is a tag: pinned to {digest} for this run; pin a digest in production"


@dataclass
class AdmittedImage:
    ref: str = ""  # what the run runs: IMAGE@sha256:... where a digest was resolved
    source: ImageSource | None = None
    warnings: list[str] = field(default_factory=list)


# ---- admin side -------------------------------------------------------------------------------


# Table columns: plain Core reads, which admission makes on every submit.
_DEFAULTS = select(ImageDefault.__table__.c.framework, ImageDefault.__table__.c.ref)
_ENTRY = AllowedRegistry.__table__.c.entry
_ALLOWED = select(_ENTRY).order_by(_ENTRY)


def framework_defaults(session: Session | Connection) -> dict[str, str]:
    return {framework: ref for framework, ref in session.execute(_DEFAULTS)}


def set_default(session: Session, framework: str, ref: str, actor: str) -> None:
    """Set (or, with an empty ``ref``, clear) the default image of a framework."""
    row = session.get(ImageDefault, framework)
    if not ref:
        if row is not None:
            session.delete(row)
        return
    ref = check_image(ref)
    if row is None:
        session.add(ImageDefault(framework=framework, ref=ref, set_by=actor))
    else:
        row.ref, row.set_by = ref, actor


def db_allowlist(session: Session | Connection) -> list[str]:
    return list(session.scalars(_ALLOWED))


def allowlist(session: Session | Connection, settings: Settings) -> list[str]:
    """Every allowed entry: the settings' then the admins'; empty means every registry."""
    return _with_configured(settings, db_allowlist(session))


def _with_configured(settings: Settings, stored: list[str]) -> list[str]:
    configured = [check_registry_entry(e) for e in settings.allowed_registries]
    return configured + [e for e in stored if e not in configured]


# Both tables admission reads, in one statement: ("default", framework, ref), ("allowed", entry).
_BOTH = union_all(
    select(
        literal("default"), _DEFAULTS.selected_columns.framework, _DEFAULTS.selected_columns.ref
    ),
    select(literal("allowed"), _ENTRY, null()),
)


def admission_tables(
    session: Session | Connection, settings: Settings
) -> tuple[dict[str, str], list[str]]:
    """:func:`framework_defaults` and :func:`allowlist`, read in one statement."""
    defaults: dict[str, str] = {}
    stored: list[str] = []
    for kind, key, ref in session.execute(_BOTH):
        if kind == "default":
            defaults[key] = ref
        else:
            stored.append(key)
    return defaults, _with_configured(settings, sorted(stored))


def allow(session: Session, entry: str, actor: str) -> str:
    entry = check_registry_entry(entry)
    if session.get(AllowedRegistry, entry) is None:
        session.add(AllowedRegistry(entry=entry, added_by=actor))
    return entry


def deny(session: Session, settings: Settings, entry: str) -> None:
    """Remove an admins' entry; one in server.yaml or none at all is an error saying so."""
    entry = check_registry_entry(entry)
    row = session.get(AllowedRegistry, entry)
    if row is not None:
        session.delete(row)
        return
    if entry in [check_registry_entry(e) for e in settings.allowed_registries]:
        raise UsageError(
            f"{entry} is allowed by the server's settings, not by an admin",
            hint="remove it from allowed_registries in server.yaml and restart the server",
        )
    raise UsageError(
        f"{entry} is not on the allowlist", hint="`sf admin registry ls` lists the entries"
    )


def allowlist_summary(entries: list[str]) -> str:
    """What ``sf server status`` says about the allowlist."""
    if not entries:
        return "every registry is allowed (no allowlist: `sf admin registry allow HOST` adds one)"
    return "allowed registries: " + ", ".join(entries)


def admin_view(session: Session, settings: Settings) -> ImageAdmin:
    configured = [check_registry_entry(e) for e in settings.allowed_registries]
    entries = [RegistryEntry(entry=e, source="settings") for e in configured] + [
        RegistryEntry(entry=e, source="admin") for e in db_allowlist(session) if e not in configured
    ]
    return ImageAdmin(
        defaults=framework_defaults(session),
        runtime_images=dict(settings.runtime_images),
        registries=entries,
        containers=settings.containers_mode(),
        summary=allowlist_summary([e.entry for e in entries]),
    )


# ---- admission --------------------------------------------------------------------------------


def check_allowed(ref: str, entries: list[str]) -> None:
    image = parse_image(ref)
    if not registry_allowed(image, entries):
        raise Rejected(
            f"image registry {image.registry} is not on this server's allowlist "
            f"(image {ref}; allowed: {', '.join(entries)})",
            hint=f"ask an admin to run `sf admin registry allow {image.registry}` (or "
            f"`.../{image.repository}`), or use an image from an allowed registry",
            details={"registry": image.registry, "image": ref, "allowed": entries},
        )


def admit_image(
    spec: JobSpec,
    method: Method,
    *,
    settings: Settings,
    defaults: dict[str, str],
    entries: list[str],
    login: LoginLookup | None = None,
) -> AdmittedImage:
    """The image the run gets, allowed and (with a container runtime) pinned; raise Rejected.
    ``login(host)``: the stored login of a registry that asks for credentials."""
    _, runtime = method.runtime_version(spec.method.framework_version or None)
    resolved = resolve_image(
        spec.image,
        framework=method.framework,
        runtime_id=runtime.runtime_id,
        framework_defaults=defaults,
        runtime_images=settings.runtime_images,
        catalog_image=runtime.image if containers.uses_catalog_images(settings.containers) else "",
    )
    if resolved is None:
        return AdmittedImage()
    check_allowed(resolved.ref, entries)
    if settings.containers_unavailable():
        raise Rejected(
            f"image {resolved.ref}: this server requires containers (containers: required) but "
            "podman does not work on it",
            hint="an admin makes `podman info` work on the server (scripts/podman.sh), or sets "
            "containers: podman|none in server.yaml",
            details={"image": resolved.ref, "containers": "required"},
        )
    if settings.containers_mode() == "none":
        # Said only of an image the user asked for; a catalog default unused is no news.
        note = f"image {resolved.ref} will not be used: this server runs jobs on the host"
        warnings = [note] if resolved.source is ImageSource.FLAG else []
        return AdmittedImage(ref=resolved.ref, source=resolved.source, warnings=warnings)
    image = parse_image(resolved.ref)
    digest = registry.resolve_digest(
        image,
        insecure=settings.insecure_registries,
        timeout_s=settings.registry_timeout_s,
        login=login,
    )
    if image.digest:
        return AdmittedImage(ref=resolved.ref, source=resolved.source)
    pinned = f"{_without_tag(resolved.ref)}@{digest}"
    warning = TAG_WARNING.format(ref=resolved.ref, digest=digest)
    return AdmittedImage(ref=pinned, source=resolved.source, warnings=[warning])


def _without_tag(ref: str) -> str:
    """``host:5000/lab/tiny:1`` -> ``host:5000/lab/tiny`` (a port is not a tag)."""
    head, _, last = ref.rpartition("/")
    name = last.split(":", 1)[0]
    return f"{head}/{name}" if head else name
