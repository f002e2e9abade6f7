"""The executor protocol: what the scheduler and the reconciler need from a place runners run.

An executor knows nothing about runs or the database. ``start`` launches one runner for one node
(its binding file says everything) and returns an opaque reference that is stored in the database
*after* the start, so a reference always names a process that was started. ``is_alive`` must work
for references made by an earlier server process (after a restart), and ``stop`` must not block.

Capabilities some executors have and others lack are small protocols of their own
(:class:`SupportsKill`, :class:`SupportsAdopt`, :class:`SupportsReap`, and for executors that
place whole attempts themselves, like Slurm: :class:`SupportsGangStart`, :class:`SupportsInventory`,
:class:`SupportsCheckPools`, :class:`SupportsPendingReason`); callers check them with
``isinstance`` and skip what an executor cannot do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from starforge.contract.profiles import Pool
    from starforge.server.settings import NodeDef


@dataclass(frozen=True)
class NodeLaunch:
    """One node of an attempt as a gang start sees it: where StarForge placed it, and its files."""

    rank: int
    binding_path: Path
    log_path: Path
    node: str = ""
    pool: str = "all"
    gpus: list[int] = field(default_factory=list)


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


@runtime_checkable
class SupportsGangStart(Protocol):
    def start_attempt(
        self, job_name: str, nodes: list[NodeLaunch], pools: list[Pool], image: str
    ) -> dict[int, str]:
        """Start every node of one attempt as one unit; the reference of each rank.

        Raises (with the executor's own message) when nothing was started. ``job_name`` is
        unique per attempt: a second call with it must not start the attempt twice."""
        ...


@runtime_checkable
class SupportsInventory(Protocol):
    def inventory(self) -> list[NodeDef] | None:
        """The nodes that can take work now (None: the executor could not tell)."""
        ...


@runtime_checkable
class SupportsCheckPools(Protocol):
    def check_pools(self, pools: list[Pool]) -> None:
        """Reject (``Rejected``) pools this executor can never place, naming the setting."""
        ...


@runtime_checkable
class SupportsPendingReason(Protocol):
    def pending_reason(self, ref: str) -> str | None:
        """Why the executor has not started ``ref`` yet (e.g. Slurm's reason), or None."""
        ...


@runtime_checkable
class SupportsLiveAttempts(Protocol):
    def live_attempts(self) -> dict[tuple[str, int], str]:
        """Every attempt this executor still holds, by (run id, attempt number), whatever the
        database says (it may be a restored, older one): its own name for each (e.g. ``Slurm job
        12``). Raises when it cannot tell now."""
        ...
