"""Loads method declarations from the catalog and computes their digests.

A method's digest is the sha256 of the canonical JSON of its parsed ``method.yaml``; the client
records it at submit and the server compares it with its own (the catalog handshake).
"""

from __future__ import annotations

import difflib
import hashlib
import json
from enum import StrEnum
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from starforge.contract.errors import MethodNotFound, StarForgeError
from starforge.contract.jobspec import MethodRef

CATALOG_ROOT = Path(__file__).resolve().parent


class EntrypointKind(StrEnum):
    PYTHON = "python"  # run an experiment file with the job's Python
    BASH = "bash"  # run an experiment shell script


class Entrypoint(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: EntrypointKind
    file: str


class Method(BaseModel):
    """One method declaration (``method.yaml``)."""

    model_config = ConfigDict(extra="forbid")

    id: str
    version: str
    framework: str
    summary: str
    roles: list[str] = Field(default_factory=lambda: ["trainer"])
    entrypoint: Entrypoint
    requires: list[str] = Field(default_factory=list)
    observability: str = "platform"
    lifecycle: list[str] = Field(default_factory=list)
    digest: str = ""  # computed, never written in the file

    @property
    def template_dir(self) -> Path:
        return CATALOG_ROOT / self.id / "template"

    def ref(self) -> MethodRef:
        return MethodRef(id=self.id, version=self.version, digest=self.digest)


def _digest(raw: dict[str, Any]) -> str:
    canonical = json.dumps(raw, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def _load_file(path: Path) -> Method:
    raw = yaml.safe_load(path.read_text())
    try:
        method = Method.model_validate(raw)
    except ValidationError as exc:
        raise StarForgeError(f"catalog declaration {path} is invalid: {exc}") from exc
    method.digest = _digest(raw)
    return method


@cache
def all_methods() -> dict[str, Method]:
    """Every built-in method by id, in catalog order."""
    found = {}
    for path in sorted(CATALOG_ROOT.glob("*/*/method.yaml")):
        method = _load_file(path)
        found[method.id] = method
    return found


def get_method(method_id: str) -> Method:
    methods = all_methods()
    if method_id in methods:
        return methods[method_id]
    if "/" not in method_id:
        options = [m for m in methods if m.split("/", 1)[1] == method_id]
        if options:
            raise MethodNotFound(
                f"method {method_id!r} must carry its framework prefix",
                hint=f"did you mean {', '.join(options)}?",
            )
    close = difflib.get_close_matches(method_id, list(methods), n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}?" if close else ""
    raise MethodNotFound(
        f"unknown method {method_id!r}",
        hint=(hint + " " if hint else "") + f"available: {', '.join(methods)} (`sf methods`)",
    )
