"""The executor protocol: what the scheduler and the reconciler need from a place runners run.

An executor knows nothing about runs or the database. ``start`` launches one runner for one node
(its binding file says everything) and returns an opaque reference that is stored in the database
*after* the start, so a reference always names a process that was started. ``is_alive`` must work
for references made by an earlier server process (after a restart), and ``stop`` must not block.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable


@runtime_checkable
class Executor(Protocol):
    name: str

    def start(self, binding_path: Path, log_path: Path) -> str:
        """Launch the runner of one node; return its reference (e.g. ``local:<pgid>``)."""
        ...

    def is_alive(self, ref: str) -> bool:
        """Whether the runner behind ``ref`` still runs."""
        ...

    def stop(self, ref: str, grace_s: float) -> None:
        """Ask the runner to stop (SIGTERM), force it after ``grace_s`` seconds; returns at once."""
        ...
