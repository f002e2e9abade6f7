"""The executor protocol: what the scheduler and the reconciler need from a place runners run.

An executor knows nothing about runs or the database. ``start`` launches one runner for one node
(its binding file says everything) and returns an opaque reference that is stored in the database
*after* the start, so a reference always names a process that was started. ``is_alive`` must work
for references made by an earlier server process (after a restart), and ``stop`` must not block.

Capabilities some executors have and others lack are small protocols of their own
(:class:`SupportsKill`, :class:`SupportsAdopt`, :class:`SupportsReap`); callers check them with
``isinstance`` and skip what an executor cannot do.
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


# ---- optional capabilities: checked with isinstance, each a method an executor may have --------


@runtime_checkable
class SupportsKill(Protocol):
    def kill(self, ref: str) -> None:
        """SIGKILL everything ``ref`` left running now (a lost runner's training)."""
        ...


@runtime_checkable
class SupportsAdopt(Protocol):
    def adopt(self, record: dict[str, object]) -> str | None:
        """The reference of the live runner its own runner record names, or None.

        For a start that a server died before recording: the runner is kept, not started twice.
        """
        ...


@runtime_checkable
class SupportsReap(Protocol):
    def reap(self) -> None:
        """Collect finished children so none lingers (called once per reconciler tick)."""
        ...
