"""The one sensitive-file policy: what may never travel in a job package.

Credentials must not enter a package (the platform passes them to jobs through its own secret
channel), so the packer applies this policy to every file it packs, tracked or not, and admission
applies it again to every manifest it is sent, whichever client wrote it. Two pure checks:

- :func:`check_path` looks at a lab-relative path: well-known credential file names and
  extensions (``.env``, ``id_rsa``, ``*.pem``, ``service-account*.json``, ``kubeconfig`` …) and
  folders that only ever hold credentials (``.ssh/``, ``.aws/``, ``.kube/``, ``.docker/``,
  ``secrets/`` …). Case-insensitive; it fails closed.
- :func:`check_content` looks at the first :data:`HEAD_BYTES` bytes of a file for signatures that
  only credentials have: a PEM private-key header and the shapes of common tokens (Hugging Face,
  GitHub, OpenAI-style ``sk-``, AWS access keys, Slack; a W&B or AWS secret key only where it is
  labelled as one). The patterns are narrow on purpose: ``tokenizer.json``, ``keys.py`` and
  training data with the word "token" in it are fine.

A finding is never lifted by a flag and never by renaming: a key under a harmless name is caught
by its content.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from fnmatch import fnmatchcase, translate

from starforge.contract.errors import SensitiveFiles
from starforge.contract.jobspec import Manifest

HEAD_BYTES = 64 * 1024  # how much of each file check_content reads: keys and tokens sit early

HINT = (
    "keep credentials out of the lab: store one with `sf secret set NAME` and ask for it with "
    "`--secret NAME` (or `secrets: [NAME]` in the experiment's config); the job reads it as the "
    "environment variable $NAME (`{name: NAME, as: file}`: a file whose path is in $NAME_FILE) — "
    "do not rename them (--allow-dirty does not lift this)"
)


@dataclass(frozen=True)
class Finding:
    """Why one file may not travel: ``rule`` is stable (for scripts), ``reason`` is for people."""

    rule: str
    reason: str


# Exact base names (lower case) of files that hold credentials.
SENSITIVE_NAMES: dict[str, str] = {
    ".env": "an environment file",
    ".envrc": "an environment file",
    ".netrc": "a netrc credentials file",
    "_netrc": "a netrc credentials file",
    ".pgpass": "a PostgreSQL password file",
    ".git-credentials": "a git credentials file",
    ".npmrc": "an npm credentials file",
    ".pypirc": "a PyPI credentials file",
    ".dockercfg": "a Docker credentials file",
    ".htpasswd": "a password file",
    "kubeconfig": "a Kubernetes config",
    "token.txt": "a token file",
    "api_key.txt": "an API key file",
}
# Globs on the base name (lower case).
SENSITIVE_GLOBS: tuple[tuple[str, str], ...] = (
    (".env.*", "an environment file"),
    ("*.pem", "a PEM key or certificate"),
    ("*.key", "a key file"),
    ("*.p12", "a PKCS#12 key store"),
    ("*.pfx", "a PKCS#12 key store"),
    ("*.jks", "a Java key store"),
    ("*.keystore", "a key store"),
    ("*.ppk", "a PuTTY private key"),
    ("*.tfstate", "a Terraform state (holds secrets)"),
    ("id_rsa*", "an SSH key"),
    ("id_dsa*", "an SSH key"),
    ("id_ecdsa*", "an SSH key"),
    ("id_ed25519*", "an SSH key"),
    ("secrets.*", "a secrets file"),
    ("*.secret", "a secrets file"),
    ("hf_token*", "a Hugging Face token file"),
    ("*credentials*.json", "a credentials file"),
    ("service-account*.json", "a cloud service-account key"),
    ("service_account*.json", "a cloud service-account key"),
    ("kubeconfig*", "a Kubernetes config"),
    ("*.kubeconfig", "a Kubernetes config"),
    ("*token*.txt", "a token file"),
)
# Folders (any component, lower case) that only ever hold credentials: ``.aws/credentials``,
# ``.kube/config``, ``.docker/config.json``, ``.ssh/id_*`` and ``secrets/…`` are all caught here.
SENSITIVE_DIRS: dict[str, str] = {
    ".ssh": "an SSH folder",
    ".aws": "an AWS credentials folder",
    ".kube": "a Kubernetes config folder",
    ".docker": "a Docker credentials folder",
    ".gnupg": "a GnuPG key folder",
    ".azure": "an Azure credentials folder",
    "gcloud": "a Google Cloud credentials folder",
    "secrets": "a secrets folder",
    ".secrets": "a secrets folder",
}

# Content signatures: (rule, reason, pattern). Each must match only what is a credential.
_SIGNATURES: tuple[tuple[str, str, re.Pattern[bytes]], ...] = (
    (
        "content.private_key",
        "a private key (PEM header)",
        re.compile(rb"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"),
    ),
    ("content.putty_key", "a PuTTY private key", re.compile(rb"PuTTY-User-Key-File-\d")),
    (
        "content.service_account",
        "a cloud service-account key",
        re.compile(rb'"type"\s*:\s*"service_account"'),
    ),
    ("content.hf_token", "a Hugging Face token", re.compile(rb"\bhf_[A-Za-z0-9]{30,}\b")),
    (
        "content.github_token",
        "a GitHub token",
        re.compile(rb"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{40,})\b"),
    ),
    (
        "content.openai_key",
        "an API secret key (sk-…)",
        re.compile(rb"\bsk-(?:[a-z]+-)?[A-Za-z0-9_-]{32,}"),
    ),
    ("content.aws_key", "an AWS access key", re.compile(rb"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("content.slack_token", "a Slack token", re.compile(rb"\bxox[abposr]-[0-9A-Za-z-]{10,}")),
    (
        "content.wandb_key",
        "a W&B API key",
        re.compile(rb"(?i)wandb[_-]?api[_-]?key[\"']?\s*[:=]\s*[\"']?[0-9a-f]{40}\b"),
    ),
    (
        "content.aws_secret",
        "an AWS secret key",
        re.compile(rb"(?i)aws_secret_access_key[\"']?\s*[:=]\s*[\"']?[A-Za-z0-9/+]{40}"),
    ),
)
# Literals that each signature's matches must contain (the same order as _SIGNATURES; for the
# case-insensitive ones, in lower case and looked for in the lowered head). A signature's regex
# runs only when one of its literals is in the head: finding a literal is a C scan, while a
# regex is tried at every offset, so ordinary files (no literal at all) cost ten scans, not ten
# regex searches. A match always contains one of its literals, so no finding is ever skipped.
_LITERALS: tuple[tuple[bool, tuple[bytes, ...]], ...] = (
    (False, (b"PRIVATE KEY",)),
    (False, (b"PuTTY-User-Key-File-",)),
    (False, (b'"service_account"',)),
    (False, (b"hf_",)),
    (False, (b"ghp_", b"gho_", b"ghu_", b"ghs_", b"ghr_", b"github_pat_")),
    (False, (b"sk-",)),
    (False, (b"AKIA", b"ASIA")),
    (False, (b"xox",)),
    (True, (b"wandb",)),
    (True, (b"aws_secret_access_key",)),
)
assert len(_LITERALS) == len(_SIGNATURES)
_CUES = tuple(
    (index, folded, literal)
    for index, (folded, literals) in enumerate(_LITERALS)
    for literal in literals
)


def _may_hold_cue(head: bytes) -> bool:
    """False only when ``head`` holds none of the literals of :data:`_LITERALS` (each as
    :func:`check_content` looks for it): the common answer for an ordinary file, found with
    fewer scans than one per literal. Each test is a necessary condition for the literals it
    guards: a one-byte scan (memchr, nearly free) for a byte that each of them contains (``I``
    is in ``PRIVATE KEY``, ``AKIA`` and ``ASIA``; ``-``, ``x`` and ``_`` in the ones they
    guard; ``w`` or ``W`` in both case-folded ones), ``gh`` for the five ``gh?_`` literals, and
    the case-folded literals looked for in the lowered head as before. A True sends the head to
    the exact per-literal check."""
    if b"I" in head and (b"PRIVATE KEY" in head or b"AKIA" in head or b"ASIA" in head):
        return True
    if b"-" in head and (b"sk-" in head or b"PuTTY-User-Key-File-" in head):
        return True
    if b"x" in head and b"xox" in head:
        return True
    underscore = b"_" in head
    if underscore and (
        b"hf_" in head or b"gh" in head or b"github_pat_" in head or b'"service_account"' in head
    ):
        return True
    if b"w" not in head and b"W" not in head:
        return False
    lowered = head.lower()
    return b"wandb" in lowered or (underscore and b"aws_secret_access_key" in lowered)


# One regex for every glob: a name that matches none (nearly every name) is answered by one
# match; only a name that matches one walks the globs to name the first, as the rule.
_ANY_GLOB = re.compile("|".join(translate(glob) for glob, _ in SENSITIVE_GLOBS))


def check_path(path: str) -> Finding | None:
    """A finding when a lab-relative POSIX path names a credential file or folder."""
    # PurePosixPath(path).parts without its parsing cost: empty and "." components dropped (a
    # leading "/" names no credential, so dropping it too changes no finding).
    parts = [p.lower() for p in path.split("/") if p and p != "."]
    if not parts:
        return None
    name = parts[-1]
    for folder in parts[:-1]:
        if folder in SENSITIVE_DIRS:
            return Finding(f"dir:{folder}", f"inside {SENSITIVE_DIRS[folder]} ({folder}/)")
    if name in SENSITIVE_NAMES:
        return Finding(f"name:{name}", SENSITIVE_NAMES[name])
    if _ANY_GLOB.match(name) is None:
        return None
    for glob, reason in SENSITIVE_GLOBS:
        if fnmatchcase(name, glob):
            return Finding(f"name:{glob}", reason)
    return None


def check_content(data: bytes) -> Finding | None:
    """A finding when the first :data:`HEAD_BYTES` of a file carry a credential's signature."""
    head = data[:HEAD_BYTES]
    if not _may_hold_cue(head):
        return None
    lowered = head.lower()
    cued = {index for index, folded, literal in _CUES if literal in (lowered if folded else head)}
    if not cued:
        return None
    for index, (rule, reason, pattern) in enumerate(_SIGNATURES):
        if index in cued and pattern.search(head):
            return Finding(rule, f"content: {reason}")
    return None


def refuse(findings: dict[str, Finding], *, extra_hint: str = "") -> None:
    """Raise :class:`SensitiveFiles` naming every file and why; nothing when there is none."""
    if not findings:
        return
    paths = sorted(findings)
    listed = "; ".join(f"{p} ({findings[p].reason})" for p in paths)
    raise SensitiveFiles(
        f"refusing to package {len(paths)} file(s) that must not travel: {listed}",
        hint=HINT + extra_hint,
        details={
            "files": paths,
            "reasons": {p: findings[p].reason for p in paths},
            "rules": {p: findings[p].rule for p in paths},
        },
    )


def refuse_manifest(
    manifest: Manifest, read_head: Callable[[str], bytes | None] | None = None
) -> None:
    """Admission's re-check: every path (and link target) by name, every content ``read_head``
    can give (``read_head(sha256)`` returns a blob's first bytes, or None when absent)."""
    findings: dict[str, Finding] = {}
    heads: dict[str, Finding | None] = {}
    for entry in manifest.files:
        target = entry.link_target
        found = check_path(entry.path) or (check_path(target) if target else None)
        if found is None and read_head is not None:
            if entry.sha256 not in heads:
                data = read_head(entry.sha256)
                heads[entry.sha256] = check_content(data) if data is not None else None
            found = heads[entry.sha256]
        if found is not None:
            findings[entry.path] = found
    refuse(findings)
