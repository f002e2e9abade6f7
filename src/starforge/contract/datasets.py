"""Platform datasets: the ``OWNER/NAME[@VERSION]`` reference, the wire models, the job's names.

A dataset version is a manifest of files over the same content-addressed blob store as job
packages, immutable once pushed. A run refers to one through an input
(:class:`~starforge.contract.jobspec.InputRef` of kind ``dataset``: ``dataset`` is the reference,
``value`` the path inside it); admission resolves a reference without ``@VERSION`` to the latest
version and records what it resolved in the run's config under :data:`RESOLVED_KEY` (never passed
to the trainer), so the runner fetches exactly that version. Pure: no I/O.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

from pydantic import Field, field_validator

from starforge.contract.base import Contract
from starforge.contract.errors import UsageError
from starforge.contract.jobspec import FileEntry
from starforge.contract.names import SAFE_SEGMENT

# Where admission records the resolved datasets in a run's config (input name -> Resolved).
RESOLVED_KEY = "_starforge_datasets"
# Config paths of the references an experiment declares (input name -> dot path).
CONFIG_PATHS: dict[str, str] = {
    "train_data": "data.train.dataset",
    "validation_data": "data.validation.dataset",
}
FLAGS: dict[str, str] = {
    "train_data": "--train-dataset",
    "validation_data": "--validation-dataset",
}
MAX_README_CHARS = 64 * 1024
CACHE_MARKER = ".starforge-dataset.json"
OUTPUT_SUBDIR = "dataset"  # FORGE_DATASET_OUT_DIR of a run with --output-dataset, under its out dir


class DatasetRef(Contract):
    owner: str
    name: str
    version: str = ""  # "" = the latest, resolved at admission

    def __str__(self) -> str:
        return f"{self.owner}/{self.name}" + (f"@{self.version}" if self.version else "")


def _safe(part: str) -> bool:
    return bool(SAFE_SEGMENT.match(part)) and part not in {".", ".."}


def parse_ref(text: str, where: str = "dataset", *, owner: str = "") -> DatasetRef:
    """``OWNER/NAME[@VERSION]`` (``NAME[@VERSION]`` when ``owner`` is given: the caller's own).

    A malformed reference is a usage error (exit 2) naming the expected form."""
    body, _, version = text.strip().partition("@")
    parts = body.split("/")
    if len(parts) == 1 and owner:
        parts = [owner, parts[0]]
    ok = len(parts) == 2 and all(_safe(p) for p in parts) and ("@" not in text or _safe(version))
    if not ok:
        raise UsageError(
            f"{where}: {text!r} is not a dataset reference",
            hint="write OWNER/NAME or OWNER/NAME@VERSION (letters, digits, '.', '_', '-'), "
            "e.g. alice/gsm8k-zh@v2; `sf dataset ls` lists them",
            details={"reference": text},
        )
    return DatasetRef(owner=parts[0], name=parts[1], version=version)


def manifest_bytes(files: list[FileEntry]) -> bytes:
    """The canonical manifest of a version (sorted by path, compact, stable keys): the server
    stores it as a blob named by its sha256, and a client compares before it uploads."""
    rows = [f.model_dump(mode="json") for f in sorted(files, key=lambda f: f.path)]
    return json.dumps({"files": rows}, sort_keys=True, separators=(",", ":")).encode()


def env_name(name: str) -> str:
    """``<NAME>_DATA_DIR``: the dataset's name upper-cased, every other character as ``_``."""
    return re.sub(r"[^A-Z0-9]", "_", name.upper()) + "_DATA_DIR"


class DatasetPush(Contract):
    """``POST /datasets``: commit a version whose blobs the caller has uploaded."""

    name: str
    version: str
    files: list[FileEntry] = Field(max_length=100_000)
    public: bool = False
    readme: str = Field(default="", max_length=MAX_README_CHARS)

    @field_validator("name", "version")
    @classmethod
    def _segment(cls, v: str) -> str:
        if not _safe(v):
            raise ValueError(f"{v!r} is not a safe name (letters, digits, '.', '_', '-')")
        return v


class DatasetVersionView(Contract):
    owner: str
    name: str
    version: str
    public: bool = False
    file_count: int = 0
    total_bytes: int = 0
    manifest_sha256: str = ""
    created_at: datetime
    readme: str = ""
    files: list[FileEntry] = Field(default_factory=list)  # `show` only

    @property
    def ref(self) -> str:
        return f"{self.owner}/{self.name}@{self.version}"


class DatasetPushResult(Contract):
    ref: str
    created: bool  # False: an identical version already existed (nothing changed)
    version: DatasetVersionView


class DatasetList(Contract):
    versions: list[DatasetVersionView] = Field(default_factory=list)


class VisibilityUpdate(Contract):
    public: bool


class Resolved(Contract):
    """One input's dataset as admission resolved it (recorded in the run's config)."""

    owner: str
    name: str
    version: str
    path: str  # inside the dataset; "." = the dataset's folder
    manifest_sha256: str

    @property
    def ref(self) -> str:
        return f"{self.owner}/{self.name}@{self.version}"


def resolved_of(config: dict[str, Any] | None) -> dict[str, Resolved]:
    """The datasets a run's config records (leniently read: it comes from the database)."""
    raw = (config or {}).get(RESOLVED_KEY) or {}
    return {key: Resolved.read(value) for key, value in raw.items()}


def strip_refs(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` without the ``data.*.dataset`` references (and the mappings they leave empty):
    the platform reads them, the trainer's arguments never carry them."""
    data = config.get("data")
    if not isinstance(data, dict):
        return config
    for path in CONFIG_PATHS.values():
        _, split, _ = path.split(".")
        section = data.get(split)
        if isinstance(section, dict):
            section.pop("dataset", None)
            if not section:
                data.pop(split)
    if not data:
        config.pop("data")
    return config
