"""Safe names and ids.

Every name that becomes part of a path or a URL (project, experiment, user, run id) passes through
:func:`check_name`, so nothing a user types can escape the storage root or a URL segment.
"""

from __future__ import annotations

import re
import secrets

from starforge.contract.errors import InvalidName

SAFE_SEGMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
RUN_ID = re.compile(r"^r-[0-9a-z]{10}$")
SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")
_RUN_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"


def check_name(kind: str, value: str) -> str:
    """Return ``value`` if it is a safe single path segment, else raise with what is allowed."""
    if not SAFE_SEGMENT.match(value or "") or value in {".", ".."}:
        raise InvalidName(
            f"invalid {kind} name {value!r}",
            hint="use letters, digits, '.', '_' and '-', starting with a letter or digit "
            "(at most 100 characters)",
            details={"kind": kind, "value": value},
        )
    return value


def new_run_id() -> str:
    """A fresh run id: ``r-`` and ten characters of Crockford-style base32 (50 random bits)."""
    return "r-" + "".join(secrets.choice(_RUN_ALPHABET) for _ in range(10))


def is_sha256(value: str) -> bool:
    return bool(SHA256_HEX.match(value))
