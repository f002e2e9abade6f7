"""JobSpec: what one submission is, and the package manifest that travels with it.

A JobSpec is built by the client and parsed strictly again by the server; the runner reads it from
``run.json`` leniently (``JobSpec.read``), so an older runner image accepts fields a newer server
added. Nothing in it is a path of the researcher's machine. Files travel as content-addressed
blobs listed in a :class:`Manifest` (lab-relative POSIX paths), so resubmitting an unchanged
experiment uploads nothing.
"""

from __future__ import annotations

import math
import posixpath
import re
from enum import StrEnum
from pathlib import PurePosixPath
from typing import Annotated, Any, Literal, TypeVar

from pydantic import AfterValidator, Field, field_validator, model_validator

from starforge.contract.base import Contract
from starforge.contract.lineage import InitFrom
from starforge.contract.names import SAFE_SEGMENT, is_sha256
from starforge.contract.secrets import MAX_SECRETS, SecretRequest
from starforge.contract.steps import MAX_STEPS, StepAction, StepSpec

API_VERSION = "starforge/v1"
T = TypeVar("T")


def _small_numbers(value: str) -> str:
    if re.search(r"\d{7,}", value):
        raise ValueError(f"{value[:40]!r}: a GPU count has at most 6 digits")
    return value


# One ``--profile`` argument (``h200:8``, ``trainer=h200:8``): short, so a number in it stays small.
ProfileArg = Annotated[str, Field(min_length=1, max_length=128), AfterValidator(_small_numbers)]


# Bounds of a manifest: what a file system everywhere accepts, and what one package may hold.
MAX_FILE_BYTES = 1 << 40  # one file's declared size (the server's blob limit is at most this)
MAX_FILES = 100_000  # files in one manifest
MAX_COMPONENT_BYTES = 255  # one path component, UTF-8 (NAME_MAX of Linux file systems)
MAX_PATH_BYTES = 4096  # a whole path, UTF-8 (PATH_MAX)


def check_relpath(value: str) -> str:
    """A lab-relative POSIX path that cannot escape the package root and that every file system
    the runner unpacks into can hold: no control characters (NUL, newline), no component over
    255 bytes, no ``..``, nothing absolute."""
    if _plainly_fine(value):
        return value
    p = PurePosixPath(value)
    if not value or p.is_absolute() or ".." in p.parts or "\\" in value or value != p.as_posix():
        raise ValueError(f"{value!r} must be a normalised relative path inside the lab")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ValueError(f"{value!r} holds a control character (NUL, newline, ...)")
    if len(value.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES:
        raise ValueError(f"{value[:80]!r}... is longer than {MAX_PATH_BYTES} bytes")
    long = [c for c in p.parts if len(c.encode("utf-8", "surrogatepass")) > MAX_COMPONENT_BYTES]
    if long:
        raise ValueError(
            f"{value[:80]!r}: a path component is longer than {MAX_COMPONENT_BYTES} bytes"
        )
    return value


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _plainly_fine(value: str) -> bool:
    """True only for a path :func:`check_relpath` accepts, found without pathlib's parsing
    (a packer checks every one of 10,000 files): ASCII, no control characters or backslashes,
    short enough, and every component neither empty, ``.`` nor ``..``. Anything else takes the
    full check, which names what is wrong."""
    if not value.isascii() or "\\" in value or len(value) > MAX_PATH_BYTES:
        return False
    if _CONTROL.search(value) is not None:
        return False
    return all(
        part and part != "." and part != ".." and len(part) <= MAX_COMPONENT_BYTES
        for part in value.split("/")
    )


def check_finite(value: T, where: str = "") -> T:
    """``value`` (JSON-like, nested) unchanged, unless a float in it is NaN or infinite: those
    have no JSON spelling, so they would be stored as something else or break a reader."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where or 'value'} is {value}; only finite numbers are accepted")
    if isinstance(value, dict):
        for key, item in value.items():
            check_finite(item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            check_finite(item, f"{where}[{i}]")
    return value


def check_tree(paths: list[str]) -> None:
    """Paths that can all be unpacked side by side: none twice, none both a file and a folder."""
    seen: set[str] = set()
    for path in paths:
        if path in seen:
            raise ValueError(f"{path!r} is listed twice")
        seen.add(path)
    for path in paths:
        parts = path.split("/")
        for i in range(1, len(parts)):
            parent = "/".join(parts[:i])
            if parent in seen:
                raise ValueError(f"{parent!r} is a file and also the folder of {path!r}")


class FileEntry(Contract):
    path: str
    sha256: str
    size: int = Field(ge=0, le=MAX_FILE_BYTES)
    executable: bool = False
    # A symlink that points inside the package travels as a link: its target, relative to the
    # link's folder (sha256 and size are the target's). Absent from the wire for plain files.
    symlink: str | None = Field(default=None, exclude_if=lambda v: v is None)

    @field_validator("path")
    @classmethod
    def _path(cls, v: str) -> str:
        return check_relpath(v)

    @field_validator("sha256")
    @classmethod
    def _digest(cls, v: str) -> str:
        if not is_sha256(v):
            raise ValueError("sha256 must be 64 lowercase hex characters")
        return v

    @model_validator(mode="after")
    def _link_stays_inside(self) -> FileEntry:
        if self.symlink is not None:
            if not self.symlink or self.symlink.startswith("/") or "\\" in self.symlink:
                raise ValueError(f"symlink {self.symlink!r} must be a relative path")
            check_relpath(self.link_target or "")
        return self

    @property
    def link_target(self) -> str | None:
        """The package path a symlink entry points at (None for a plain file)."""
        if self.symlink is None:
            return None
        return posixpath.normpath(posixpath.join(posixpath.dirname(self.path), self.symlink))


class Manifest(Contract):
    files: list[FileEntry] = Field(default_factory=list, max_length=MAX_FILES)

    @model_validator(mode="after")
    def _tree(self) -> Manifest:
        check_tree([f.path for f in self.files])
        return self

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def digests(self) -> list[str]:
        return sorted({f.sha256 for f in self.files})


class InputKind(StrEnum):
    HUB = "hub"  # a Hugging Face hub id, resolved inside the job
    PACKAGE = "package"  # a lab-relative path whose files travel in the manifest
    SHARED = "shared"  # an absolute path on the shared storage, used in place
    DATASET = "dataset"  # a path inside a platform dataset (``dataset``: OWNER/NAME[@VERSION])


class InputRef(Contract):
    kind: InputKind
    value: str = Field(max_length=4096)
    # For kind ``dataset``: the reference as given (absent from the wire for other kinds).
    dataset: str = Field(default="", max_length=400, exclude_if=lambda v: v == "")

    @field_validator("value")
    @classmethod
    def _value(cls, v: str) -> str:
        if not v:
            raise ValueError("must not be empty")
        return v


class ParamBinding(Contract):
    """A parameter an experiment binds: its config path and type when the lock was written."""

    path: str
    type: str


class MethodRef(Contract):
    """Which method declaration a run was made with (what the experiment's lock records)."""

    id: str
    version: str
    digest: str
    framework_version: str = ""
    runtime_id: str = ""
    bindings: dict[str, ParamBinding] = Field(default_factory=dict)


class Provenance(Contract):
    git_commit: str
    git_dirty: bool = False
    untracked: list[str] = Field(default_factory=list)
    client_version: str


class Inputs(Contract):
    model: InputRef | None = None
    train_data: InputRef | None = None
    validation_data: InputRef | None = None


class SweepTag(Contract):
    """Which sweep a run is a variant of, and the parameters that make it that variant."""

    id: str = Field(min_length=1, max_length=40)
    index: int = Field(ge=0, le=10_000)
    params: dict[str, Any] = Field(default_factory=dict)


class JobSpec(Contract):
    api_version: Literal["starforge/v1"] = API_VERSION
    project: str
    experiment: str
    method: MethodRef
    profiles: list[ProfileArg] = Field(min_length=1, max_length=16)
    inputs: Inputs = Field(default_factory=Inputs)
    hyperparams: dict[str, Any] = Field(default_factory=dict)
    image: str = Field(default="", max_length=1024)
    provenance: Provenance
    # Where the run's curves live for an ``external``-observability method (e.g. a W&B project);
    # empty for ``platform`` methods, whose curves the control plane keeps itself.
    observability_url: str = Field(default="", max_length=2048)
    # The secrets the run asks for, by NAME only (values reach the job at start: contract/secrets).
    secrets: list[SecretRequest] = Field(
        default_factory=list, max_length=MAX_SECRETS, exclude_if=lambda v: not v
    )
    # A variant of a sweep (``sf sweep``); absent from the wire for a plain submission.
    sweep: SweepTag | None = Field(default=None, exclude_if=lambda v: v is None)
    # ``--then ACTION``: platform steps run after training succeeds, in order (contract.steps).
    # Absent from the wire when empty, so servers that predate steps accept the spec.
    steps: list[StepAction] = Field(
        default_factory=list, max_length=MAX_STEPS, exclude_if=lambda v: not v
    )
    # Set by the control plane on a step run only (a submission carrying one is refused).
    step: StepSpec | None = Field(default=None, exclude_if=lambda v: v is None)
    # ``--init-from``: the parent run's artifact this run starts from (``contract.lineage``);
    # admission fills in the resolved path. Absent from the wire when not given.
    init_from: InitFrom | None = Field(default=None, exclude_if=lambda v: v is None)
    # ``OWNER/NAME@VERSION`` to publish the run's ``FORGE_DATASET_OUT_DIR`` as, once it succeeds
    # (absent from the wire when not asked for).
    output_dataset: str = Field(default="", max_length=400, exclude_if=lambda v: v == "")

    @field_validator("hyperparams")
    @classmethod
    def _finite(cls, v: dict[str, Any]) -> dict[str, Any]:
        return check_finite(v)

    @field_validator("project", "experiment")
    @classmethod
    def _safe(cls, v: str) -> str:
        if not SAFE_SEGMENT.match(v) or v in {".", ".."}:
            raise ValueError(f"{v!r} is not a safe name")
        return v

    @property
    def exp_dir(self) -> str:
        """The experiment's folder inside the package."""
        return f"experiments/{self.experiment}"
