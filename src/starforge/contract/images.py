"""OCI image references: ``[registry[:port]/]name[/name...][:tag][@sha256:<64 hex>]``.

Tags are fine; a digest, if given, must be complete (``@sha256:`` and 64 hex characters), so a
truncated digest never silently resolves to something else. The server's allowlist decides
which registries may be used; this module only checks the form.
"""

from __future__ import annotations

import re

from starforge.contract.errors import ImageError

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
