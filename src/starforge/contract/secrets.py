"""Secrets: what a run asks for by name, and what crosses the wire about them.

A run names the secrets it needs (``secrets: [HF_TOKEN, {name: WANDB_API_KEY, as: file}]`` in the
experiment's config, or ``sf submit --secret NAME``); only those NAMES ever enter the JobSpec, the
run's ``run.json`` or any view. The values live encrypted on the server and reach the job only
when one of its runners starts (``POST /runs/{id}/secrets`` with the runner's token): as an
environment variable of the secret's name, or (``as: file``) as a file only the job can read whose
path is in ``<NAME>_FILE``. No response model here carries a value except :class:`RunSecrets`,
the runner's answer.

A secret may not take a name the platform gives the job (``FORGE_*``, ``STARFORGE_*``, the rank,
topology and device variables of :mod:`starforge.contract.env` and of ``torchrun``, the ``HF_*``
the platform sets) nor one the loader or the interpreter reads (``PATH``, ``LD_*``, ``PYTHON*``,
``HOME``): a secret is put in the job's environment after the platform's variables, so it would
override them (a secret named ``FORGE_OUT_DIR`` sent a run's output elsewhere). :func:`reserved_why`
is the one rule; ``sf secret set``, ``POST /secrets`` and admission all ask it.
"""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum
from functools import cache
from typing import Any

from pydantic import Field, field_validator

from starforge.contract.base import Contract
from starforge.contract.jobvars import KNOWN_KEYS, PER_NODE_KEYS

MAX_SECRETS = 32  # secrets one run may ask for
MAX_VALUE_BYTES = 64 << 10  # one secret's value (a token, a key file)
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")  # usable as an environment variable
FILE_SUFFIX = "_FILE"  # ``as: file``: the job finds the file's path in <NAME>_FILE
HF_TOKEN = "HF_TOKEN"  # the secret the gated-model preflight uses, when the user has one


# torchrun's (torch.distributed.run) variables for each process it starts.
TORCHRUN_KEYS = frozenset(
    {
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "GROUP_WORLD_SIZE",
        "ROLE_RANK",
        "ROLE_WORLD_SIZE",
        "ROLE_NAME",
        "MASTER_ADDR",
        "MASTER_PORT",
    }
)
LOADER_KEYS = frozenset({"PATH", "HOME"})  # with every LD_* and PYTHON* (the prefixes below)
RESERVED_PREFIXES = ("FORGE_", "STARFORGE_", "MASTER_", "TORCHELASTIC_", "LD_", "PYTHON")


@cache
def reserved_names() -> frozenset[str]:
    """Every name the platform sets for a job (contract.jobvars), torchrun's, and the loader's."""
    return frozenset(KNOWN_KEYS) | PER_NODE_KEYS | TORCHRUN_KEYS | LOADER_KEYS


@cache
def reserved_list() -> str:
    """What every refusal names: the prefixes, then the names no prefix covers."""
    return ", ".join(
        [f"{p}*" for p in RESERVED_PREFIXES]
        + sorted(n for n in reserved_names() if not n.startswith(RESERVED_PREFIXES))
    )


def reserved_why(name: str, mount: str = "env") -> str | None:
    """Why a secret called ``name`` (received ``as: mount``) may not be: the variable of the
    job it would take over (``NAME``, or ``NAME_FILE`` for a file), else None. Case-sensitive,
    as environment variables are."""
    for var in (name, name + FILE_SUFFIX) if mount == "file" else (name,):
        if var in reserved_names() or var.startswith(RESERVED_PREFIXES):
            return (
                f"secret name {name!r} is reserved: the job's {var} is the platform's "
                f"(reserved: {reserved_list()})"
            )
    return None


def reserved_in(requests: list[SecretRequest]) -> list[str]:
    """The names among ``requests`` that :func:`reserved_why` refuses, in order."""
    return [r.name for r in requests if reserved_why(r.name, r.mount.value) is not None]


def refuse_reserved(requests: list[SecretRequest]) -> None:
    """ValueError naming every reserved name ``requests`` asks for and the reserved list."""
    bad = reserved_in(requests)
    if bad:
        raise ValueError(
            f"secret name(s) reserved for the platform: {', '.join(bad)} (the job's "
            f"environment has them from the platform; reserved: {reserved_list()})"
        )


def check_name(name: str) -> str:
    if not NAME.match(name):
        raise ValueError(
            f"{name!r} is not a secret name: letters, digits and _, not starting with a digit "
            "(it becomes an environment variable of the job)"
        )
    return name


class Mount(StrEnum):
    ENV = "env"  # an environment variable named like the secret (the default)
    FILE = "file"  # a 0600 file of the job's user; its path in <NAME>_FILE


class SecretRequest(Contract):
    """One secret a run asks for: its name and how the job receives it."""

    name: str
    mount: Mount = Mount.ENV

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return check_name(v)


def request_of(name: Any, mount: Any = Mount.ENV) -> SecretRequest:
    """One request from what a user wrote, with a one-line error (not pydantic's report)."""
    if not isinstance(name, str):
        raise ValueError(f"secrets: {name!r} is not a name")
    check_name(name)
    if mount not in {m.value for m in Mount}:
        raise ValueError(f"secrets: {name} as {mount!r}: use `as: env` or `as: file`")
    return SecretRequest(name=name, mount=Mount(mount))


def parse_config_secrets(config: dict[str, Any]) -> list[SecretRequest]:
    """The ``secrets:`` of a composed experiment config: names, or ``{name: X, as: file}``."""
    raw = config.get("secrets")
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ValueError("config key 'secrets' must be a list of names or {name, as} mappings")
    found = []
    for item in raw:
        if isinstance(item, str):
            found.append(request_of(item))
        elif isinstance(item, dict) and set(item) <= {"name", "as"} and "name" in item:
            found.append(request_of(item["name"], item.get("as", Mount.ENV)))
        else:
            raise ValueError(f"secrets: {item!r} is neither a name nor a {{name, as}} mapping")
    return found


def merge_requests(*groups: list[SecretRequest]) -> list[SecretRequest]:
    """One request per name, in first-seen order; a name any group asks ``as: file`` is a file."""
    merged: dict[str, SecretRequest] = {}
    for group in groups:
        for req in group:
            if req.name not in merged or req.mount is Mount.FILE:
                merged[req.name] = req  # a dict keeps the first-seen position on replace
    return list(merged.values())


class Scope(StrEnum):
    USER = "user"  # the owner's own runs only
    LAB = "lab"  # every user's runs (set by an admin); a user's own of the same name wins


class SecretSet(Contract):
    """``POST /secrets``: set (or replace) one secret."""

    name: str
    value: str = Field(min_length=1)
    lab: bool = False  # a lab-wide secret (admins only)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return check_name(v)

    @field_validator("value")
    @classmethod
    def _size(cls, v: str) -> str:
        if len(v.encode()) > MAX_VALUE_BYTES:
            raise ValueError(f"a secret's value is at most {MAX_VALUE_BYTES} bytes")
        return v


class SecretInfo(Contract):
    """What anyone ever sees of a secret: never its value."""

    name: str
    scope: Scope
    owner: str = ""  # the user it belongs to; "" for a lab-wide one
    created_at: datetime
    updated_at: datetime
    set_by: str = ""


class SecretList(Contract):
    secrets: list[SecretInfo] = Field(default_factory=list)


class SecretRemoved(Contract):
    name: str
    scope: Scope
    removed: bool


class KeyRotated(Contract):
    """``sf admin secrets rotate-key``: every secret re-encrypted under ``key_id``."""

    key_id: str
    reencrypted: int
    retired: list[str] = Field(default_factory=list)  # key ids no longer needed


class RunSecretsRequest(Contract):
    """The runner's ask, with its run token: the secrets of this attempt."""

    attempt: int = Field(ge=1)
    node_rank: int = Field(default=0, ge=0)


class SecretValue(Contract):
    name: str
    mount: Mount = Mount.ENV
    value: str


class RunSecrets(Contract):
    """The one answer that carries values: to the run's runner, while its attempt starts or runs."""

    secrets: list[SecretValue] = Field(default_factory=list)
