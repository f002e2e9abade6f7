"""Loads method declarations from the catalog and computes their digests.

A method's digest is the sha256 of the canonical JSON of its parsed ``method.yaml``: the lock
records it and the server compares it with its own (the catalog handshake).

A framework's ``shared/`` folder (``catalog/trl/shared/``), when it has one, holds what its
methods' templates have in common, in one place: ``sf new`` copies it into every new experiment
of the framework beside the method's ``template/`` (:attr:`Method.template_dirs`), so the copied
scripts import it as a sibling module and the experiment still runs on its own. It is no method
(it has no ``method.yaml``) and no part of any digest.

Declarations are read lazily, one file per method: ``sf submit`` needs only the method its
experiment uses (:func:`find_method`), so it does not parse the whole catalog; listing every
method (:func:`all_methods`) reads the rest.
"""

from __future__ import annotations

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
SHARED_DIR = "shared"  # catalog/<framework>/shared/: files every template of the framework gets

__all__ = [
    "CATALOG_ROOT",
    "SHARED_DIR",
    "Entrypoint",
    "EntrypointKind",
    "Method",
    "all_methods",
    "find_method",
    "get_method",
]


class Method(MethodDecl):
    """A loaded declaration: the file's content plus its digest."""

    digest: str = ""

    @property
    def template_dir(self) -> Path:
        return CATALOG_ROOT / self.id / "template"

    @property
    def template_dirs(self) -> list[Path]:
        """What a new experiment of this method is made of, in copy order: the framework's
        ``shared/`` folder (when it has one), then the method's ``template/``."""
        shared = CATALOG_ROOT / self.framework / SHARED_DIR
        return [shared, self.template_dir] if shared.is_dir() else [self.template_dir]

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
def _load_cached(path: Path) -> Method:
    """One declaration, parsed once per process (shared by find_method and all_methods)."""
    return load_file(path)


@cache
def all_methods() -> dict[str, Method]:
    """Every built-in method by id, in catalog order (trl, verl, nemo-rl, custom)."""
    found = {}
    for path in CATALOG_ROOT.glob("*/*/method.yaml"):
        method = _load_cached(path)
        found[method.id] = method
    return {k: found[k] for k in sorted(found, key=_order)}


def _plain(part: str) -> bool:
    return bool(part) and not part.startswith(".") and "\\" not in part


def find_method(method_id: str) -> Method | None:
    """The built-in method ``method_id`` (``framework/name``), or None; reads only its file when
    its folder is where the id says (else the whole catalog, which is keyed by declared id)."""
    parts = method_id.split("/")
    if len(parts) == 2 and all(_plain(p) for p in parts):
        path = CATALOG_ROOT / parts[0] / parts[1] / "method.yaml"
        if path.is_file():
            method = _load_cached(path)
            if method.id == method_id:
                return method
    return all_methods().get(method_id)


def get_method(method_id: str) -> Method:
    found = find_method(method_id)
    if found is not None:
        return found
    import difflib  # only for the did-you-mean of an unknown id

    methods = all_methods()
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
