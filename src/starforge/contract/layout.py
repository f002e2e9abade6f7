"""The files of the storage root and of a run: the one place their names are spelled.

The server writes a run's directory, the runner reads and writes inside it, the report SDK spools
under its ``out`` dir and every one of them finds the control plane through the root's beacon.
They agree on these names through :class:`StorageLayout` and :class:`RunLayout` and nothing
else. Pure path arithmetic: nothing here touches the disk, so the CLI's ``--dry-run`` can name
the paths of a run on a root it has never seen (``<storage>``)::

    <root>/control-plane.json                          the beacon (rewritten by each server start)
    <root>/blobs/sha256/<2 hex>/<62 hex>               content-addressed files
    <root>/blobs/packs/<32 hex>.pack                   batches of small blobs (contract.packs)
    <root>/cache/datasets/<owner>/<name>/<version>/    datasets pulled for runs
    <root>/runs/<user>/<project>/<experiment>/<run_id>/
        work/                                          the unpacked package
        work/.starforge-unpacked.json                  which manifest the work dir holds
        out/                                           checkpoints, exports, eval reports
        out/.starforge/report-spool/                   the report SDK's unsent points
        out/.starforge/ca.pem                          the CA the job trusts the server by
        logs/attempt-<n>.log                           node 0's log
        logs/attempt-<n>.node-<r>.log                  node r's log (r > 0)
        state/run.json                                 the run's spec and manifest
        state/attempt-<n>.node-<r>.binding.json        what the server resolved for the node
        state/attempt-<n>.node-<r>.runner.json         who runs the node (pid, process group)
        state/attempt-<n>.node-<r>.exit.json           how the node ended
        state/attempt-<n>.node-<r>.events/             the runner's unsent lifecycle reports
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from starforge.contract.names import check_name

CONTROL_PLANE_FILE = "control-plane.json"
UNPACKED_MARKER = ".starforge-unpacked.json"
REPORT_SPOOL = ".starforge/report-spool"  # under a run's out dir (the job writes only there)
CA_FILE = ".starforge/ca.pem"  # under a run's out dir: where its container and its uid read it
WORK, OUT, LOGS, STATE = "work", "out", "logs", "state"  # a run's folders, under its directory
RUN_SUBDIRS = (WORK, OUT, LOGS, STATE)


@dataclass(frozen=True)
class StorageLayout:
    """Where things live under one storage root (the same path on every node)."""

    root: Path

    @property
    def beacon(self) -> Path:
        """The control plane's address, for runners and jobs that outlive a server start."""
        return self.root / CONTROL_PLANE_FILE

    def blob(self, digest: str) -> Path:
        """A content-addressed file; ``digest`` must already be a checked sha256 hex string."""
        return self.root / "blobs" / "sha256" / digest[:2] / digest[2:]

    @property
    def packs(self) -> Path:
        """The folder of the pack files (many small blobs each; :mod:`starforge.contract.packs`)."""
        return self.root / "blobs" / "packs"

    def pack(self, name: str) -> Path:
        """A pack file; ``name`` must already be a checked pack name (``contract.packs``)."""
        return self.packs / name

    def dataset_cache(self, owner: str, name: str, version: str) -> Path:
        return self.root / "cache" / "datasets" / owner / name / version

    def run(self, user: str, project: str, experiment: str, run_id: str) -> RunLayout:
        """The run's layout; every part must be a safe name (no ``..``, no ``/``)."""
        parts = (
            check_name("user", user),
            check_name("project", project),
            check_name("experiment", experiment),
            check_name("run", run_id),
        )
        return RunLayout(self.root.joinpath("runs", *parts))


@dataclass(frozen=True)
class RunLayout:
    """Every file of one run, relative to its directory."""

    BINDING = "binding.json"  # the suffix of a node's binding file in state/

    dir: Path

    @property
    def work(self) -> Path:
        return self.dir / WORK

    @property
    def unpacked_marker(self) -> Path:
        return self.work / UNPACKED_MARKER

    @property
    def out(self) -> Path:
        return self.dir / OUT

    @property
    def report_spool(self) -> Path:
        return self.out / REPORT_SPOOL

    @property
    def ca_file(self) -> Path:
        """The server's ``tls_ca_file``, written by the runner for the job (STARFORGE_CA_FILE)."""
        return self.out / CA_FILE

    @property
    def logs(self) -> Path:
        return self.dir / LOGS

    @property
    def state(self) -> Path:
        return self.dir / STATE

    @property
    def subdirs(self) -> tuple[Path, ...]:
        return tuple(self.dir / sub for sub in RUN_SUBDIRS)

    @property
    def run_json(self) -> Path:
        return self.state / "run.json"

    @property
    def datasets(self) -> Path:
        """The run's own views of its cached dataset versions (runner/datasets.private_views)."""
        return self.dir / "datasets"

    @property
    def staged(self) -> Path:
        """What the server staged for a job of its member's account (runner/stage.py)."""
        return self.datasets / "staged.json"

    @staticmethod
    def attempt_of(name: str) -> int | None:
        """The attempt a file of ``logs/`` or ``state/`` belongs to, from its name
        (``attempt-<n>.…``), or None for a file of no attempt (``run.json``)."""
        prefix, _, rest = name.partition("-")
        number, dot, _ = rest.partition(".")
        if prefix != "attempt" or not dot or not number.isdigit():
            return None
        return int(number)

    def log(self, attempt: int, node_rank: int = 0) -> Path:
        # Node 0 keeps the short name: single-node runs (the common case) read naturally.
        if node_rank == 0:
            return self.logs / f"attempt-{attempt}.log"
        return self.logs / f"attempt-{attempt}.node-{node_rank}.log"

    def _node_file(self, attempt: int, node_rank: int, suffix: str) -> Path:
        return self.state / f"attempt-{attempt}.node-{node_rank}.{suffix}"

    def binding(self, attempt: int, node_rank: int) -> Path:
        return self._node_file(attempt, node_rank, self.BINDING)

    def runner_record(self, attempt: int, node_rank: int) -> Path:
        return self._node_file(attempt, node_rank, "runner.json")

    def exit_record(self, attempt: int, node_rank: int) -> Path:
        return self._node_file(attempt, node_rank, "exit.json")

    def submitted(self, attempt: int) -> Path:
        """Written by an executor before it submits the attempt as one job (Slurm's sbatch):
        where it is absent, no job of the attempt can exist."""
        return self.state / f"attempt-{attempt}.submitted"

    def events_spool(self, attempt: int, node_rank: int) -> Path:
        """A folder per node and attempt: a later attempt never replays an older one's reports."""
        return self._node_file(attempt, node_rank, "events")
