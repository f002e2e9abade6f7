"""Speaking to OCI registries: a tag resolved to the digest the registry serves for it.

One request per resolution: ``HEAD /v2/<repository>/manifests/<tag>`` with the OCI and Docker
manifest (and index) types in ``Accept`` (a registry holding an OCI manifest answers 404 to a
Docker-only Accept), the digest read from ``Docker-Content-Digest``. Registries on a loopback
address, and those the settings list as insecure, are spoken to over plain HTTP; every other over
HTTPS. Every failure is a :class:`~starforge.contract.errors.Rejected` naming the registry's
address and what to do, so admission creates nothing.
"""

from __future__ import annotations

import ipaddress
import re

import httpx

from starforge.contract.errors import Rejected
from starforge.contract.images import ImageRef

MANIFEST_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
# docker.io is a name; its API lives here.
_API_HOST = {"docker.io": "registry-1.docker.io"}


def is_loopback(registry: str) -> bool:
    if registry.startswith("["):  # [::1]:5000
        host = registry[1:].split("]", 1)[0]
    else:
        host = registry.rsplit(":", 1)[0] if registry.count(":") == 1 else registry
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def base_url(registry: str, insecure: list[str]) -> str:
    scheme = "http" if is_loopback(registry) or registry in insecure else "https"
    return f"{scheme}://{_API_HOST.get(registry, registry)}"


def resolve_digest(image: ImageRef, *, insecure: list[str], timeout_s: float = 5.0) -> str:
    """The digest the registry serves for ``image``'s tag (``image.digest`` when already pinned)."""
    if image.digest:
        return image.digest
    url = f"{base_url(image.registry, insecure)}/v2/{image.repository}/manifests/{image.tag}"
    where = f"{image.registry}/{image.repository}:{image.tag}"
    details = {"registry": image.registry, "url": url}
    try:
        resp = httpx.head(url, headers={"Accept": ", ".join(MANIFEST_TYPES)}, timeout=timeout_s)
    except httpx.HTTPError as exc:
        raise Rejected(
            f"image registry {image.registry} is unreachable ({url}): {exc or type(exc).__name__}",
            hint="check that the registry is up and reachable from the server, or pin a digest "
            "(IMAGE@sha256:...) to submit without asking it",
            details=details,
        ) from exc
    if resp.status_code == 404:
        raise Rejected(
            f"image {where} not found: the registry has no such repository or tag",
            hint="check the name and tag (push the image first), or pick another --image",
            details=details,
        )
    if resp.status_code in (401, 403):
        raise Rejected(
            f"image registry {image.registry} refused to tell the digest of {where} "
            f"(HTTP {resp.status_code}: it needs credentials)",
            hint="pin a digest (IMAGE@sha256:...) or use a registry the server can read",
            details=details,
        )
    digest = resp.headers.get("Docker-Content-Digest", "")
    if resp.status_code != 200 or not _DIGEST.match(digest):
        raise Rejected(
            f"image registry {image.registry} gave no digest for {where} "
            f"(HTTP {resp.status_code}, Docker-Content-Digest {digest!r})",
            hint="pin a digest (IMAGE@sha256:...) or check the registry",
            details=details,
        )
    return digest
