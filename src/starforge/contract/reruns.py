"""``sf job rerun``: a new run made from what an earlier run recorded, changed only where asked.

The request names no package, spec or config: the server takes them from the run it reruns (its
package's blobs, its parameters, its image as pinned, the dataset versions admission resolved
for it, its profile and inputs). What the caller may change is what ``sf submit`` takes as
flags: ``-s KEY=VALUE`` (parsed by the method's declared types, on the server, like a
submission's) and ``--profile``. The answer says which keys changed, from what to what, and
what the rerun does not carry over (``notes``), so the CLI can say so.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from starforge.contract.api import SubmitResponse
from starforge.contract.base import Contract
from starforge.contract.jobspec import ProfileArg

# The server prefixes the key with "rerun:", so a rerun's key never meets a submission's.
KEY_PREFIX = "rerun:"


class RerunRequest(Contract):
    """``POST /runs/{ref}/rerun``: the overrides, and a key that makes a resent request one run."""

    sets: list[str] = Field(default_factory=list, max_length=200)  # -s KEY=VALUE, as typed
    profiles: list[ProfileArg] | None = Field(default=None, min_length=1, max_length=16)
    idempotency_key: str = Field(min_length=8, max_length=128 - len(KEY_PREFIX))


class RerunChange(Contract):
    """One key the rerun changed: ``learning_rate`` (a parameter) or ``profile``."""

    key: str
    old: Any = None  # None: the run had no value for it
    new: Any = None


class RerunResponse(SubmitResponse):
    """The new run (as ``POST /jobs`` answers) and what makes it differ from the one it reruns."""

    rerun_of: str
    changes: list[RerunChange] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)  # pinned versions, what was not carried over
    # The recorded package the new run reuses, none of it uploaded: its distinct files (blobs)
    # and their bytes, counted as `sf submit` counts what it uploads and skips.
    package_files: int = 0
    package_bytes: int = 0
