"""Release numbers as the client, the server and the runner compare them.

A version is read from its leading numbers (``0.2.0``, ``0.2.0rc1``, ``v0.2``, ``0.2.0+local``):
pre-release and local parts are ignored, so a release candidate counts as its release. Pure, no
import: the server's gate calls it on every request, before any I/O.
"""

from __future__ import annotations

import re

_VERSION = re.compile(r"^\s*v?(\d{1,9}(?:\.\d{1,9})*)(?!\d)")


def parse(text: str) -> tuple[int, ...] | None:
    """``0.1.0``, ``0.1.0rc1`` or ``0.2`` as numbers (at least three); None when it is not a
    version at all (a part of ten digits or more is none: no release is numbered so)."""
    match = _VERSION.match(text)
    if not match:
        return None
    parts = tuple(int(p) for p in match.group(1).split("."))
    return parts + (0,) * (3 - len(parts)) if len(parts) < 3 else parts


def older(version: str, than: str) -> bool:
    """Whether ``version`` is a release before ``than``; False when either is not a version."""
    have, need = parse(version), parse(than)
    return have is not None and need is not None and have < need
