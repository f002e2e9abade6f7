"""What may never travel in a job package, shared by the packer and admission.

Secrets must not enter a package: the platform has its own channel for them. The check is on the
file's base name, case-insensitive, and fails closed. ``tokenizer.json`` and friends are fine:
the token patterns are narrow on purpose.
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from pathlib import PurePosixPath

SENSITIVE_NAMES = frozenset(
    {
        ".env",
        ".envrc",
        ".netrc",
        "credentials.json",
        "token.txt",
        "api_key.txt",
        ".pgpass",
        ".git-credentials",
        ".npmrc",
        ".pypirc",
    }
)
SENSITIVE_GLOBS = (
    ".env.*",
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "id_rsa*",
    "id_ed25519*",
    "id_ecdsa*",
    "id_dsa*",
    "secrets.*",
    "*.secret",
    "hf_token*",
    "*_credentials.json",
    "*token*.txt",
)


def is_sensitive(path: str) -> bool:
    name = PurePosixPath(path).name.lower()
    return name in SENSITIVE_NAMES or any(fnmatchcase(name, g) for g in SENSITIVE_GLOBS)
