"""Speaking to OCI registries: a tag resolved to the digest the registry serves for it.

One request per resolution: ``HEAD /v2/<repository>/manifests/<tag>`` with the OCI and Docker
manifest (and index) types in ``Accept`` (a registry holding an OCI manifest answers 404 to a
Docker-only Accept), the digest read from ``Docker-Content-Digest``. A registry that answers with
a challenge (401: Docker Hub, ghcr.io and nvcr.io do for every anonymous request) gets its token
or its Basic login (``server/registry_auth.py``), with the login an admin stored for the host
(``sf admin registry login HOST``) where there is one, and the request is repeated. Registries on
a loopback address, and those the settings list as insecure, are spoken to over plain HTTP; every
other over HTTPS. Every failure is a :class:`~starforge.contract.errors.Rejected` (or one of its
registry subclasses) naming the registry's address and what to do, so admission creates nothing.
"""

from __future__ import annotations

import ipaddress
import re

import httpx

from starforge.contract.errors import Rejected
from starforge.contract.images import ImageRef
from starforge.server import registry_auth

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
    scheme = "http" if plain_http(registry, insecure) else "https"
    return f"{scheme}://{_API_HOST.get(registry, registry)}"


def plain_http(host: str, insecure: list[str]) -> bool:
    """Whether the server speaks plain HTTP to ``host`` (a registry or its token service)."""
    return is_loopback(host) or host in insecure


def resolve_digest(
    image: ImageRef,
    *,
    insecure: list[str],
    timeout_s: float = 5.0,
    login: registry_auth.LoginLookup | None = None,
) -> str:
    """The digest the registry serves for ``image``'s tag (``image.digest`` when already pinned).
    ``login(host)`` gives the stored login of a registry that asks for credentials."""
    if image.digest:
        return image.digest
    url = f"{base_url(image.registry, insecure)}/v2/{image.repository}/manifests/{image.tag}"
    where = f"{image.registry}/{image.repository}:{image.tag}"
    details = {"registry": image.registry, "url": url}
    headers = {"Accept": ", ".join(MANIFEST_TYPES)}
    with httpx.Client(timeout=timeout_s) as client:
        try:
            resp = client.head(url, headers=headers)
        except httpx.HTTPError as exc:
            raise Rejected(
                f"image registry {image.registry} is unreachable ({url}): "
                f"{exc or type(exc).__name__}",
                hint="check that the registry is up and reachable from the server, or pin a "
                "digest (IMAGE@sha256:...) to submit without asking it",
                details=details,
            ) from exc
        if resp.status_code in (401, 403):
            exchange = registry_auth.Exchange(
                client=client,
                image=image,
                url=url,
                headers=headers,
                where=where,
                plain_ok=lambda host: plain_http(host, insecure),
            )
            resp = registry_auth.authorize(exchange, resp, login)
    if resp.status_code == 404:
        raise Rejected(
            f"image {where} not found: the registry has no such repository or tag",
            hint="check the name and tag (push the image first), or pick another --image",
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
