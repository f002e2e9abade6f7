"""The Slurm executor: one Slurm job per attempt, submitted from this (login) node with ``sbatch``.

StarForge stays the queue of record (quotas, priority, fair share) and chooses the nodes; Slurm
places exactly those (``--nodelist``) and runs one runner per node (``slurm_compile``). References
are ``slurm:<jobid>:<rank>``: every node of an attempt shares its job.

- Starting is idempotent per attempt: the job is named ``sf.<run_id>.<attempt>`` and a live job of
  that name is reused instead of submitted again. Slurm is asked for it only where the run's
  folder says a submission was tried (``RunLayout.submitted``, written durably before each
  ``sbatch``), or its binding is older than this server process (a release before the marker
  may have submitted it): an attempt's first start, nearly every start, costs one ``squeue``
  less. An
  ``sbatch`` that fails raises with Slurm's own message; nothing was submitted, so nothing is
  left half-created.
- The batch script is given rank 0's ``NodeAddr`` from the ``sinfo`` this server read (the
  scheduler pass reads it fresh), so the job asks ``scontrol`` nothing before its runners start.
- Liveness is read in one ``squeue --json`` per ``query_cache_s`` (one per reconcile pass, not per
  node). A job Slurm no longer lists, or lists in a final state, is dead. When ``squeue`` fails
  (slurmctld down) ``is_alive`` raises and the reconciler leaves the node alone: nothing is lost.
- A job that ended without its runners' exit records (killed by Slurm: out of memory, time
  limit, preempted) gets one written from Slurm's state (``slurm_states.ending``), so the run ends
  with the right reason and code; a node failure writes none: the node is lost and auto-retried.
- ``stop``: ``scancel --signal=TERM`` to the job's steps (the runners checkpoint; the batch
  shell and ``srun`` are left alone, see ``slurm_compile``), then ``scancel`` after the grace if
  the job still runs, on a thread so it never blocks. ``kill``: ``scancel --signal=KILL --full``.
- ``adopt``: a runner under Slurm records its job id; a server that died between ``sbatch`` and
  recording the start adopts the job by that id.
- A member's attempt runs as the member's Unix account: the bindings' ``job_user``
  (``services/access/isolation.job_account``). Before ``sbatch --uid/--gid`` the run's folder and
  the folders above it are handed to that account: the run its own and closed to every other
  (0700), the member's folder of runs and those down to the run root's, entered by the account's
  group only (0750). Its runners (which run as it, not as root) write their logs and records
  there, and no other member's job can enter them. The server, root, still reads and writes
  them.
- When that attempt's Slurm job is over (every process of it gone, as Slurm says: not when the
  runners report, since a stopped node may still be checkpointing), the server takes the run
  back (``reap``, once per reconciler tick): root's, the account's group reading what its job
  wrote and writing nothing, so the member's later jobs (the same account) cannot change a
  finished run that other runs read through ``--init-from`` or a retry. The next attempt's
  submit hands it over again. Which runs an account holds is written, before ``sbatch``, to
  ``<storage root>/slurm-handed/`` (root's), so a server that restarts still takes them back.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pwd
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from starforge.contract.atomic import write_json_atomic
from starforge.contract.env import Binding
from starforge.contract.errors import StarForgeError
from starforge.contract.layout import RUN_SUBDIRS, RunLayout
from starforge.contract.profiles import Pool
from starforge.server.executors import slurm_compile, slurm_inventory, slurm_states
from starforge.server.executors.base import NodeLaunch
from starforge.server.settings import NodeDef, SlurmSettings

log = logging.getLogger(__name__)
PREFIX = "slurm:"
CLI_TIMEOUT_S = 30.0
CLUSTER_CACHE_S = 2.0  # how long admission's partition check reuses one sinfo answer
HANDED = "slurm-handed"  # <storage root>/HANDED/<job name>.json: an account holds that run


class SlurmError(StarForgeError):
    """A Slurm command failed; the message is Slurm's own (it never leaves the server)."""


def parse_ref(ref: str) -> tuple[int, int | None]:
    """``slurm:<jobid>[:<rank>]`` -> (job id, rank or None)."""
    parts = ref.split(":")
    if (
        parts[0] + ":" != PREFIX
        or len(parts) not in (2, 3)
        or not all(p.isdigit() for p in parts[1:])
    ):
        raise StarForgeError(f"{ref!r} is not a Slurm executor reference")
    return int(parts[1]), (int(parts[2]) if len(parts) == 3 else None)


def job_name(run_id: str, attempt: int) -> str:
    return f"sf.{run_id}.{attempt}"


# Bindings written before this process started are another server's (one that died, or the
# release before an upgrade, which wrote no submission marker): their attempt is looked up.
_STARTED = time.time()


def _before_this_process(binding: Path) -> bool:
    try:
        return binding.stat().st_mtime < _STARTED
    except OSError:
        return True


def _attempt_of(name: str) -> int | None:
    tail = name.rsplit(".", 1)[-1]
    return int(tail) if name.startswith("sf.") and tail.isdigit() else None


def run_cli(argv: list[str], stdin: str | None = None) -> str:
    """Run one Slurm command; its stdout, or SlurmError with Slurm's own message."""
    try:
        done = subprocess.run(
            argv, input=stdin, capture_output=True, text=True, timeout=CLI_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise SlurmError(f"{argv[0]} could not run: {exc}") from exc
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip() or f"exit status {done.returncode}"
        raise SlurmError(f"{argv[0]} failed: {said}")
    return done.stdout


def query_json(argv: list[str]) -> dict[str, Any]:
    """A Slurm command's ``--json`` answer; SlurmError when it says it failed.

    Slurm 22.05's ``sinfo --json``/``squeue --json`` exit 0 when the controller does not answer,
    with the failure in ``errors`` and no nodes or jobs: read as "none", every run would look
    lost and every partition missing."""
    try:
        payload = json.loads(run_cli(argv))
    except ValueError as exc:
        raise SlurmError(f"{argv[0]} answered something that is not JSON: {exc}") from exc
    errors = payload.get("errors") if isinstance(payload, dict) else None
    if not isinstance(payload, dict) or errors:
        said = "; ".join(
            str(e.get("description") or e.get("error") or e) if isinstance(e, dict) else str(e)
            for e in errors or ["no answer"]
        )
        raise SlurmError(f"{argv[0]} failed: {said}")
    return payload


class SlurmExecutor:
    name = "slurm"

    def __init__(
        self, settings: SlurmSettings, runner: list[str], mounts: list[str] | None = None
    ) -> None:
        self.settings = settings
        self.runner = list(runner)
        self.mounts = list(mounts or [])
        self._lock = threading.Lock()
        self._jobs: dict[int, slurm_states.SlurmJob] = {}
        self._jobs_at = self._jobs_asked = -1e9
        self._jobs_meta: dict[int, dict[str, Any]] = {}
        self._submitted: dict[int, float] = {}  # job id -> when this process submitted it
        self._stopping: set[int] = set()  # jobs a stop thread is ending now
        self._stop_lock = threading.Lock()  # not _lock: that one is held during a squeue
        self._cluster: slurm_inventory.Cluster | None = None
        self._cluster_at = -1e9
        # Where the runs handed to accounts are listed: the storage root, which the runtime
        # passes as a mount (the first server of a restart knows it before any start), and
        # every storage root a start named.
        self._roots = {Path(m) for m in self.mounts}
        self._hand_lock = threading.Lock()  # a hand-over and a take-back never interleave

    # ---- reading Slurm ---------------------------------------------------------------------

    def jobs(self, fresh: bool = False) -> dict[int, slurm_states.SlurmJob]:
        """Every job Slurm lists (finished ones stay for MinJobAge), cached ``query_cache_s``."""
        with self._lock:
            if fresh or time.monotonic() - self._jobs_at >= self.settings.query_cache_s:
                asked = time.monotonic()
                payload = query_json(["squeue", "--json"])
                self._jobs = slurm_states.parse_jobs(payload)
                self._jobs_meta = {
                    j["job_id"]: j for j in payload.get("jobs") or [] if "job_id" in j
                }
                self._jobs_at = self._jobs_asked = asked
            return self._jobs

    def live_attempts(self) -> dict[tuple[str, int], str]:
        """The attempts of the live jobs named ``sf.<run_id>.<attempt>`` (SlurmError when
        ``squeue`` cannot answer): pending or running, their nodes are Slurm's, not free."""
        held: dict[tuple[str, int], str] = {}
        for job in self.jobs(fresh=True).values():
            attempt = _attempt_of(job.name)
            if attempt is not None and job.alive:
                run_id = job.name[len("sf.") : -len(f".{attempt}")]
                held.setdefault((run_id, attempt), f"Slurm job {job.job_id} ({job.state})")
        return held

    def cluster(self, fresh: bool = False) -> slurm_inventory.Cluster:
        with self._lock:
            stale = time.monotonic() - self._cluster_at >= CLUSTER_CACHE_S
            if fresh or self._cluster is None or stale:
                self._cluster = slurm_inventory.parse_nodes(query_json(["sinfo", "--json"]))
                self._cluster_at = time.monotonic()
            return self._cluster

    def inventory(self) -> list[NodeDef] | None:
        try:
            # Fresh: read before each scheduler pass, and a node that went down a moment ago
            # must not get the retry of the run it just lost.
            return slurm_inventory.inventory(self.cluster(fresh=True), self.settings)
        except (SlurmError, ValueError):
            log.warning("could not read Slurm's nodes", exc_info=True)
            return None

    def check_pools(self, pools: list[Pool]) -> None:
        try:
            cluster = self.cluster()
        except SlurmError:
            if self._cluster is None:
                return  # Slurm cannot say now: the run queues, and its start will tell
            cluster = self._cluster  # the controller is restarting: its partitions remain
        slurm_inventory.check_pools(pools, cluster, self.settings)

    def _components(self, job_id: int) -> list[slurm_states.SlurmJob]:
        """The job and, for a heterogeneous job, every component of it."""
        jobs = self.jobs()
        submitted = self._submitted.get(job_id)
        if job_id not in jobs and submitted is not None and self._jobs_asked <= submitted:
            jobs = self.jobs(fresh=True)  # that answer was asked before this job existed
        meta = self._jobs_meta
        found = [
            j
            for j in jobs.values()
            if j.job_id == job_id or meta.get(j.job_id, {}).get("het_job_id") == job_id
        ]
        return sorted(found, key=lambda j: j.job_id)

    def pending_reason(self, ref: str) -> str | None:
        try:
            parts = self._components(parse_ref(ref)[0])
        except SlurmError:
            return None
        return next((j.pending_reason for j in parts if j.pending_reason), None)

    def is_alive(self, ref: str) -> bool:
        job_id, rank = parse_ref(ref)
        parts = self._components(job_id)  # raises when Slurm cannot answer: nothing is judged
        if any(j.alive for j in parts):
            return True
        if parts and rank is not None:
            self._record_ending(job_id, rank, parts)
        return False

    def _record_ending(self, job_id: int, rank: int, parts: list[slurm_states.SlurmJob]) -> None:
        """Write the exit record a runner killed with its job could not write (never overwrite)."""
        worst = next((j for j in parts if j.state in ("NODE_FAIL", "BOOT_FAIL")), None)
        worst = worst or next((j for j in parts if j.state != "COMPLETED"), parts[0])
        end = slurm_states.ending(worst.state, worst.exit_code, worst.signal)
        meta = self._jobs_meta.get(job_id, {})
        attempt, workdir = (
            _attempt_of(str(meta.get("name", ""))),
            meta.get("current_working_directory"),
        )
        if end.lost or attempt is None or not workdir:
            return
        path = RunLayout(Path(workdir).parent).exit_record(attempt, rank)
        record = {
            "exit_code": end.exit_code,
            "end_reason": end.end_reason.value if end.end_reason else None,
            "at": time.time(),
            "slurm_state": worst.state,
        }
        _create_once(path, record)

    # ---- acting ----------------------------------------------------------------------------

    def start_attempt(
        self, job_name: str, nodes: list[NodeLaunch], pools: list[Pool], image: str
    ) -> dict[int, str]:
        tried = self._submit_marker(job_name, nodes)
        if tried is None or tried.exists() or _before_this_process(nodes[0].binding_path):
            existing = self._live_job_named(job_name)
            if existing is not None:  # submitted by a server that died before recording it
                log.info("%s is already Slurm job %s: not submitted again", job_name, existing)
                return {n.rank: f"{PREFIX}{existing}:{n.rank}" for n in nodes}
        if tried is not None and not tried.exists():
            write_json_atomic(tried, {"job_name": job_name, "at": time.time()})
        account = submit_account(nodes[0].binding_path)
        held = None if account is None else self._hand_over(job_name, nodes[0], account)
        try:
            script = slurm_compile.compile_batch(self.batch_job(job_name, nodes, pools, image))
            out = run_cli(slurm_compile.sbatch_argv(account), stdin=script)
        except BaseException:
            if held is not None:  # no job holds the run: it is root's again at once
                self._take_back(held)
            raise
        job_id = int(out.strip().split(";")[0])
        self._submitted[job_id] = time.monotonic()  # a squeue asked before now cannot list it
        if held is not None:
            with self._hand_lock:
                _write_handed(held, {**_read_handed(held), "job_id": job_id})
        return {n.rank: f"{PREFIX}{job_id}:{n.rank}" for n in nodes}

    def _hand_over(self, job_name: str, node: NodeLaunch, account: slurm_compile.Account) -> Path:
        """Stage the run and hand it to ``account``, listed first as held by this attempt (the
        entry that ``reap`` takes it back by); the entry's path."""
        storage = Path(Binding.read(node.binding_path.read_bytes()).storage_root)
        run_dir = node.binding_path.parent.parent
        held = storage / HANDED / f"{job_name}.json"
        with self._hand_lock:
            self._roots.add(storage)
            held.parent.mkdir(mode=0o700, exist_ok=True)
            entry = {"run_dir": str(run_dir), "uid": account.uid, "gid": account.gid}
            _write_handed(held, {**entry, "job_id": None})
        try:
            stage_run(node.binding_path, account)
            with self._hand_lock:  # not while reap takes an earlier attempt's run back
                hand_run_to(account, run_dir)
        except BaseException:
            self._take_back(held)
            raise
        return held

    def reap(self) -> None:
        """Take back the runs of the attempts whose Slurm jobs are over (once per reconciler
        tick; it asks Slurm nothing while no account holds a run)."""
        for root in list(self._roots):
            try:
                entries = sorted((root / HANDED).glob("*.json"))
            except OSError:
                continue
            for held in entries:
                try:
                    if self._job_is_over(held):
                        self._take_back(held)
                except SlurmError:
                    return  # Slurm cannot say now: nothing is taken back until it can
                except (OSError, ValueError):
                    log.warning("could not take back the run %s lists", held, exc_info=True)

    def _job_is_over(self, held: Path) -> bool:
        """Whether no process of the attempt ``held`` names can still write into its run."""
        job_id = _read_handed(held).get("job_id")
        if isinstance(job_id, int):
            return not any(j.alive for j in self._components(job_id))
        if not _before_this_process(held):
            return False  # this server is submitting it now
        # A server that died between the hand-over and recording the job: Slurm knows its name.
        name = held.name.removesuffix(".json")
        return not any(j.alive and j.name == name for j in self.jobs().values())

    def _take_back(self, held: Path) -> None:
        """Drop the entry ``held``; take its run back unless another attempt holds it now."""
        with self._hand_lock:
            entry = _read_handed(held)
            held.unlink(missing_ok=True)
            run_dir = str(entry.get("run_dir", ""))
            others = [_read_handed(p).get("run_dir") for p in held.parent.glob("*.json")]
            uid, gid = entry.get("uid"), entry.get("gid")
            if run_dir and isinstance(uid, int) and isinstance(gid, int) and run_dir not in others:
                take_run_back(Path(run_dir), uid, gid)

    @staticmethod
    def _submit_marker(job_name: str, nodes: list[NodeLaunch]) -> Path | None:
        """The file that says this attempt's submission was tried (None: a job name of no
        attempt, always looked up in Slurm)."""
        attempt = _attempt_of(job_name)
        if attempt is None:
            return None
        return RunLayout(nodes[0].binding_path.parent.parent).submitted(attempt)

    def _live_job_named(self, name: str) -> int | None:
        """The id of a job of this name Slurm still holds (pending or running), or None."""
        # squeue's text mode filters by name (its --json answer lists every job): cheap.
        out = run_cli(["squeue", "--noheader", f"--name={name}", "--format=%i %T"])
        for line in out.splitlines():
            job, _, state = line.partition(" ")
            job = job.split("+")[0]  # a heterogeneous job's components are <id>+<offset>
            if job.isdigit() and state.strip() in slurm_states.LIVE:
                return int(job)
        return None

    def batch_job(
        self, name: str, nodes: list[NodeLaunch], pools: list[Pool], image: str
    ) -> slurm_compile.BatchJob:
        ordered = sorted(nodes, key=lambda n: n.rank)
        components = []
        for pool in pools:
            mine = [n for n in ordered if n.pool == pool.name]
            if not mine:
                continue
            target = self.settings.target(pool.series)
            components.append(
                slurm_compile.Component(
                    partition=target.partition,
                    gres_type=target.gres_type,
                    gpus_per_node=pool.gpus_per_node,
                    nodes=[n.node for n in mine],
                    bindings=[str(n.binding_path) for n in mine],
                )
            )
        s = self.settings
        return slurm_compile.BatchJob(
            job_name=name,
            log_path=str(ordered[0].log_path),
            workdir=str(ordered[0].binding_path.parent),
            components=components,
            runner=self.runner,
            signal_before_s=s.signal_before_s,
            time_limit=s.time_limit,
            image=image,
            pyxis=s.pyxis,
            mounts=self.mounts,
            extra_args=list(s.sbatch_args),
            master_addr=self._address_of(ordered[0].node),
        )

    def _address_of(self, node: str) -> str:
        """The ``NodeAddr`` of ``node`` from the latest ``sinfo`` read ("" when none was read,
        or it does not list the node: the batch script then asks ``scontrol``)."""
        cluster = self._cluster
        if cluster is None or not any(n.name == node for n in cluster.nodes):
            return ""
        return cluster.address(node)

    def start(self, binding_path: Path, log_path: Path) -> str:
        raise SlurmError("the Slurm executor starts whole attempts (start_attempt), not nodes")

    def stop(self, ref: str, grace_s: float) -> None:
        job_id, _ = parse_ref(ref)
        with self._stop_lock:  # every node of an attempt names the same job: stop it once
            if job_id in self._stopping:
                return
            self._stopping.add(job_id)
        thread = threading.Thread(target=self._stop, args=(job_id, grace_s), daemon=True)
        thread.start()

    def _stop(self, job_id: int, grace_s: float) -> None:
        try:
            self._stop_job(job_id, grace_s)
        finally:
            with self._stop_lock:
                self._stopping.discard(job_id)

    def _stop_job(self, job_id: int, grace_s: float) -> None:
        try:
            # The steps only (the runners): they checkpoint and exit, and the job ends with them.
            run_cli(["scancel", "--signal=TERM", str(job_id)])
        except SlurmError:  # a pending job cannot be signalled: cancel it outright
            self._cancel(job_id)
            return
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            try:
                if not any(j.alive for j in self._components(job_id)):
                    return
            except SlurmError:
                pass
            time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
        self._cancel(job_id)

    def kill(self, ref: str) -> None:
        job_id, _ = parse_ref(ref)
        with contextlib.suppress(SlurmError):  # a pending job has nothing to signal
            run_cli(["scancel", "--signal=KILL", "--full", str(job_id)])
        self._cancel(job_id)

    def _cancel(self, job_id: int) -> None:
        try:
            run_cli(["scancel", str(job_id)])
        except SlurmError:
            log.warning("could not cancel Slurm job %s", job_id, exc_info=True)
        self._jobs_at = -1e9

    def adopt(self, record: dict[str, object]) -> str | None:
        job_id, rank = record.get("slurm_job_id"), record.get("node_rank")
        if not isinstance(job_id, int) or not isinstance(rank, int):
            return None
        try:
            alive = any(j.alive for j in self._components(job_id))
        except SlurmError:
            return None
        return f"{PREFIX}{job_id}:{rank}" if alive else None


def submit_account(binding_path: Path) -> slurm_compile.Account | None:
    """The account to submit the attempt as: its bindings' ``job_user`` (one for all nodes),
    when this server is root and it is another account; None submits as this server's user
    (a runner that is root then starts the job as a named ``job_user`` itself)."""
    try:
        name = Binding.read(binding_path.read_bytes()).job_user
    except OSError:  # no binding to read: its runner cannot start either, whoever it runs as
        return None
    if not name or os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise SlurmError(
            f"the Unix account {name!r} does not exist on the server's host",
            hint="create it (on the login and compute nodes), or map the user to another: "
            "sf admin user set-unix NAME UNIXUSER",
        ) from None
    if entry.pw_uid in (0, os.geteuid()):
        return None
    return slurm_compile.Account(name=name, uid=entry.pw_uid, gid=entry.pw_gid)


def stage_run(binding_path: Path, account: slurm_compile.Account) -> None:
    """Unpack the run's package and link its datasets into the run, as root, before the attempt
    is submitted as ``account``, which may read neither the blob store nor the dataset cache
    (``python -m starforge.runner stage``: the runner's own code, in a process of its own, as
    the control plane never imports the runner)."""
    argv = [sys.executable, "-m", "starforge.runner", "stage", str(binding_path), str(account.gid)]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        said = (done.stderr.strip() or done.stdout.strip()).splitlines()
        raise SlurmError(said[-1] if said else f"staging the run exited {done.returncode}")


def hand_run_to(account: slurm_compile.Account, run_dir: Path) -> None:
    """Give ``account`` its run's folders (recursively: a retry's new bindings too), closed to
    every other account (0700). The member's folder of runs and the folders down to the run stay
    root's, entered and listed by the account's group only (0750; as a per-run uid's member's
    group on a host): the account can rename none of its finished runs away. The run's dataset
    views stay root's (read-only links to the cache: the job must change none of them)."""
    mine = run_dir.parents[2] if len(run_dir.parents) > 3 else None  # <root>/runs/<member>
    if mine is not None and mine.parent.name == "runs":
        for folder in [mine, *[p for p in run_dir.parents if mine in p.parents]]:
            os.chown(folder, 0, account.gid)
            os.chmod(folder, 0o750)
    for sub in RUN_SUBDIRS:
        (run_dir / sub).mkdir(parents=True, exist_ok=True)
    os.chown(run_dir, account.uid, account.gid)
    os.chmod(run_dir, 0o700)
    views = RunLayout(run_dir).datasets
    for folder, dirs, files in os.walk(run_dir):
        if Path(folder) == run_dir and views.name in dirs:
            dirs.remove(views.name)  # neither followed nor handed over
        for name in dirs + files:
            os.lchown(os.path.join(folder, name), account.uid, account.gid)


def take_run_back(run_dir: Path, uid: int, gid: int) -> None:
    """Make a run whose job (of account ``uid``) is over root's again: every folder and file of
    it owned by root with group ``gid`` (the account's), the group reading (and entering) what
    its owner could, writing nothing, others nothing; its ``state`` (the runner's bindings and
    records) root's alone. Links are never followed. Each folder is taken before what it holds
    is listed, so a job of the same account running meanwhile cannot swap an entry for a link
    under the walk."""
    views = RunLayout(run_dir).datasets  # root's already: links to the cache
    _close(run_dir, uid, gid)
    for folder, dirs, files in os.walk(run_dir):
        if Path(folder) == run_dir and views.name in dirs:
            dirs.remove(views.name)
        for name in dirs + files:
            _close(os.path.join(folder, name), uid, gid)
    state = RunLayout(run_dir).state
    if state.is_dir() and not state.is_symlink():
        os.chmod(state, 0o700)


def _close(path: str | Path, uid: int, gid: int) -> None:
    st = os.lstat(path)
    if stat.S_ISREG(st.st_mode) and st.st_nlink > 1 and st.st_uid != uid:
        return  # a hard link the job made to a file not its own: that file is left as it is
    os.lchown(path, 0, gid)
    if stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode):
        owner = st.st_mode & 0o700
        os.chmod(path, owner | (owner & 0o500) >> 3)


def _read_handed(held: Path) -> dict[str, Any]:
    try:
        entry = json.loads(held.read_text())
    except FileNotFoundError:
        return {}
    return entry if isinstance(entry, dict) else {}


def _write_handed(held: Path, entry: dict[str, Any]) -> None:
    write_json_atomic(held, entry, mode=0o600)


def _create_once(path: Path, record: dict[str, Any]) -> None:
    """Write ``record`` at ``path`` unless a file is there (the runner's own record wins)."""
    if path.exists():
        return
    try:
        # Not renamed over: fails if the runner wrote its record meanwhile.
        write_json_atomic(path, record, mode=0o600, durable=False, replace=False)
    except FileExistsError:
        pass
    except OSError:
        log.warning("could not write %s", path, exc_info=True)
