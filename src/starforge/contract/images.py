"""OCI image references: ``[registry[:port]/]name[/name...][:tag][@sha256:<64 hex>]``.

Tags are fine; a digest, if given, must be complete (``@sha256:`` and 64 hex characters), so a
truncated digest never silently resolves to something else.

Also the two pure rules both sides share: which image a run gets (:func:`resolve_image`: the
``--image`` flag, else the server's framework default, else the server's runtime registry, else
the catalog's image for the method's runtime) and whether a registry is allowed
(:func:`registry_allowed`: an entry ``HOST[:PORT][/PREFIX]`` allows the images under it; no
entries at all allows every registry). Reading the server's tables and speaking to registries
happen elsewhere (``server/services/data/images.py``, ``server/registry.py``).
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import NamedTuple

from starforge.contract.base import Contract
from starforge.contract.errors import ImageError

DEFAULT_REGISTRY = "docker.io"  # where a reference without a registry part is pulled from

_COMPONENT = r"[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*"
_REGISTRY = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9-]+)*(?::\d+)?/)"
_REF = re.compile(
    rf"^(?P<registry>{_REGISTRY})?(?P<name>{_COMPONENT}(?:/{_COMPONENT})*)"
    r"(?::(?P<tag>[\w][\w.-]{0,127}))?(?:@(?P<digest>.+))?$"
)
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


def check_image(ref: str) -> str:
    ref = ref.strip()
    match = _REF.match(ref)
    if not ref or not match:
        raise ImageError(
            f"--image {ref!r} is not a valid image reference",
            hint="e.g. myregistry.io/train:v1 or myregistry.io/train@sha256:<64 hex digits>",
        )
    digest = match.group("digest")
    if digest is not None and not _DIGEST.match(digest):
        raise ImageError(
            f"--image {ref!r}: a digest must be the full sha256:<64 hex digits>",
            hint="copy the whole digest (`docker inspect --format '{{.RepoDigests}}' IMAGE`), "
            "or use a tag",
        )
    return ref


class ImageRef(NamedTuple):
    """A reference split into its parts; ``registry`` is ``docker.io`` when none was written."""

    registry: str
    repository: str
    tag: str
    digest: str

    @property
    def pinned(self) -> str:
        """``registry/repository@digest`` (only meaningful when ``digest`` is set)."""
        return f"{self.registry}/{self.repository}@{self.digest}"


def parse_image(ref: str) -> ImageRef:
    """Split a valid reference; a missing tag (and no digest) means ``latest``, as pulls do."""
    ref = check_image(ref)
    match = _REF.match(ref)
    assert match is not None  # check_image matched it
    registry = (match.group("registry") or "").rstrip("/")
    name = match.group("name")
    # "lab/tiny" has no registry: the first part is a registry only with a dot, a port or
    # "localhost" (the rule docker and podman follow).
    if registry and not ("." in registry or ":" in registry or registry == "localhost"):
        name, registry = f"{registry}/{name}", ""
    if not registry:
        registry = DEFAULT_REGISTRY
        if registry == DEFAULT_REGISTRY and "/" not in name:
            name = f"library/{name}"
    digest = match.group("digest") or ""
    tag = match.group("tag") or ("" if digest else "latest")
    return ImageRef(registry=registry, repository=name, tag=tag, digest=digest)


class ImageSource(StrEnum):
    """Which rule chose a run's image (shown by ``--dry-run`` and ``sf job status``)."""

    FLAG = "flag"  # --image
    FRAMEWORK_DEFAULT = "framework-default"  # sf admin image default FRAMEWORK REF
    RUNTIME_REGISTRY = "runtime-registry"  # runtime_images in server.yaml
    CATALOG = "catalog"  # the method's runtime version in the catalog


class ResolvedImage(Contract):
    ref: str
    source: ImageSource


def resolve_image(
    flag: str,
    *,
    framework: str,
    runtime_id: str,
    framework_defaults: dict[str, str],
    runtime_images: dict[str, str],
    catalog_image: str,
) -> ResolvedImage | None:
    """The image a run gets, first match wins; None when no rule names one."""
    candidates = (
        (flag, ImageSource.FLAG),
        (framework_defaults.get(framework, ""), ImageSource.FRAMEWORK_DEFAULT),
        (runtime_images.get(runtime_id, ""), ImageSource.RUNTIME_REGISTRY),
        (catalog_image, ImageSource.CATALOG),
    )
    for ref, source in candidates:
        if ref:
            return ResolvedImage(ref=ref, source=source)
    return None


_ENTRY = re.compile(
    r"^(?P<host>[a-zA-Z0-9](?:[a-zA-Z0-9.-]*[a-zA-Z0-9])?(?::\d{1,5})?)"
    rf"(?:/(?P<prefix>{_COMPONENT}(?:/{_COMPONENT})*))?/?$"
)


def check_registry_entry(entry: str) -> str:
    """An allowlist entry ``HOST[:PORT][/PREFIX]``, normalised (host lower case, no trailing /)."""
    match = _ENTRY.match(entry.strip())
    if not match:
        raise ImageError(
            f"{entry!r} is not a registry entry of the form HOST[:PORT][/PREFIX]",
            hint="give HOST[:PORT][/PREFIX], e.g. ghcr.io/my-lab or 127.0.0.1:5000",
        )
    host, prefix = match.group("host").lower(), match.group("prefix")
    return f"{host}/{prefix}" if prefix else host


def registry_allowed(image: ImageRef, entries: list[str]) -> bool:
    """Whether an entry allows the image; an empty list allows every registry."""
    if not entries:
        return True
    for entry in entries:
        host, _, prefix = entry.partition("/")
        if host != image.registry.lower():
            continue
        if not prefix or image.repository == prefix or image.repository.startswith(prefix + "/"):
            return True
    return False


# ---- the admin API's bodies (/admin/images, /admin/registries) -------------------------------


class RegistryEntry(Contract):
    entry: str
    source: str  # "settings" (server.yaml, changed there) or "admin" (sf admin registry allow)


class ImageAdmin(Contract):
    """The server's image settings: framework defaults, runtime images and the allowlist."""

    defaults: dict[str, str]  # framework -> image (sf admin image default)
    runtime_images: dict[str, str]  # runtime id -> image (server.yaml)
    registries: list[RegistryEntry]  # empty: every registry is allowed
    containers: str  # podman | none | required (in force)
    summary: str  # what `sf server status` says about the allowlist


class ImageDefaultUpdate(Contract):
    ref: str = ""  # empty: remove the framework's default


class RegistryUpdate(Contract):
    entry: str
    allowed: bool = True
