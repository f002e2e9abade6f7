"""Loads method declarations from the catalog and computes their digests.

A method's digest is the sha256 of the canonical JSON of its parsed ``method.yaml``: the lock
records it and the server compares it with its own (the catalog handshake).
"""

from __future__ import annotations

import difflib
import hashlib
import json
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from starforge.catalog.schema import Entrypoint, EntrypointKind, MethodDecl, RuntimeVersion
from starforge.contract.config import load_yaml
from starforge.contract.errors import MethodNotFound, StarForgeError, UsageError
from starforge.contract.jobspec import MethodRef

CATALOG_ROOT = Path(__file__).resolve().parent
FRAMEWORK_ORDER = ("trl", "verl", "nemo-rl", "custom")

__all__ = ["CATALOG_ROOT", "Entrypoint", "EntrypointKind", "Method", "all_methods", "get_method"]


class Method(MethodDecl):
    """A loaded declaration: the file's content plus its digest."""

    digest: str = ""

    @property
    def template_dir(self) -> Path:
        return CATALOG_ROOT / self.id / "template"

    def runtime_version(self, version: str | None = None) -> tuple[str, RuntimeVersion]:
        """The runtime for ``version`` (default: the method's default framework version)."""
        chosen = version or self.runtime.default
        found = self.runtime.versions.get(chosen)
        if found is None:
            raise UsageError(
                f"{self.id} has no framework version {chosen!r}",
                hint=f"available: {', '.join(self.runtime.versions)}",
            )
        return chosen, found

    def ref(self, framework_version: str | None = None) -> MethodRef:
        version, runtime = self.runtime_version(framework_version)
        return MethodRef(
            id=self.id,
            version=self.version,
            digest=self.digest,
            framework_version=version,
            runtime_id=runtime.runtime_id,
        )


def declaration_digest(raw: dict[str, Any]) -> str:
    canonical = json.dumps(raw, sort_keys=True, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def load_file(path: Path) -> Method:
    raw = load_yaml(path.read_text())
    try:
        method = Method.model_validate(raw)
    except ValidationError as exc:
        raise StarForgeError(f"catalog declaration {path} is invalid: {exc}") from exc
    method.digest = declaration_digest(raw)
    return method


def _order(method_id: str) -> tuple[int, str]:
    fw = method_id.split("/", 1)[0]
    rank = FRAMEWORK_ORDER.index(fw) if fw in FRAMEWORK_ORDER else len(FRAMEWORK_ORDER)
    return rank, method_id


@cache
def all_methods() -> dict[str, Method]:
    """Every built-in method by id, in catalog order (trl, verl, nemo-rl, custom)."""
    found = {}
    for path in CATALOG_ROOT.glob("*/*/method.yaml"):
        method = load_file(path)
        found[method.id] = method
    return {k: found[k] for k in sorted(found, key=_order)}


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
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise MethodNotFound(
        f"unknown method {method_id!r}",
        hint=f"{hint}available: {', '.join(methods)} (`sf methods`)",
    )
