"""Factories for the control plane's tests: a fake executor, packages, specs, submissions.

The fake executor records starts and stops instead of launching runners (the local executor has
its own tests with real processes). Nothing here opens a socket.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import select

from starforge.catalog.loader import get_method
from starforge.contract.api import LifecycleEvent, SubmitRequest, SubmitResponse
from starforge.contract.auth import Role
from starforge.contract.jobspec import FileEntry, Inputs, JobSpec, Manifest, Provenance
from starforge.contract.profiles import ProfileDef
from starforge.contract.states import JobStatus
from starforge.server import statemachine
from starforge.server.db.models import Run, User
from starforge.server.runtime import Runtime
from starforge.server.services.access import users
from starforge.server.services.data import blobs
from starforge.server.services.runs import jobs, lifecycle
from starforge.server.services.scheduling import dispatch
from starforge.server.settings import NodeDef

INVENTORY = [
    NodeDef(name="h200-1", series="h200", gpus=8),
    NodeDef(name="h200-2", series="h200", gpus=8),
    NodeDef(name="h100-1", series="h100", gpus=8),
]
PROFILES = [
    ProfileDef(name="h200", series="h200", gpus_per_node=8, nodes=1, env={"NCCL_X": "1"}),
    ProfileDef(name="h100", series="h100", gpus_per_node=8, nodes=1),
    ProfileDef(name="a100", series="a100", gpus_per_node=8, nodes=1),
    ProfileDef(name="h200x16", series="h200", gpus_per_node=16, nodes=1),
]
TOKENS = {"alice": "alice-token", "bob": "bob-token"}


class FakeExecutor:
    """Records what the scheduler asks; processes 'live' until a test lets them die."""

    name = "fake"

    def __init__(self) -> None:
        self.started: list[tuple[str, Path, Path]] = []
        self.stopped: list[str] = []
        self.alive: set[str] = set()
        self.fail_on_start: int | None = None  # fail the n-th start (0-based)
        self._ids = itertools.count(1)

    def start(self, binding_path: Path, log_path: Path) -> str:
        if self.fail_on_start is not None and len(self.started) == self.fail_on_start:
            self.fail_on_start = None
            raise OSError("exec format error")
        ref = f"fake:{next(self._ids)}"
        self.started.append((ref, binding_path, log_path))
        self.alive.add(ref)
        return ref

    def is_alive(self, ref: str) -> bool:
        return ref in self.alive

    def stop(self, ref: str, grace_s: float) -> None:
        self.stopped.append(ref)

    def die(self, ref: str) -> None:
        self.alive.discard(ref)


# ---- factories --------------------------------------------------------------------------------


def member(name: str) -> users.Caller:
    """``name`` calling the services as a member does (what a member's token signs in as)."""
    return users.Caller(name, Role.MEMBER)


def _users(rt: Runtime) -> set[str]:
    with rt.transaction() as session:
        return set(TOKENS) | set(session.scalars(select(User.name)))


def package(
    rt: Runtime,
    experiment: str = "exp",
    method_id: str = "custom/custom",
    extra: dict[str, bytes] | None = None,
    upload: bool = True,
) -> Manifest:
    """A manifest holding the method's entrypoint (plus ``extra``), its blobs in the store."""
    entry = f"experiments/{experiment}/{get_method(method_id).entrypoint.file}"
    files = {entry: b"echo hello\n", **(extra or {})}
    entries = []
    for path, data in sorted(files.items()):
        digest = rt.storage.put_bytes(data) if upload else hashlib.sha256(data).hexdigest()
        if upload:  # as if each user had uploaded it (existence is answered per user)
            for user in _users(rt):
                blobs.record(rt, user, digest)
        entries.append(FileEntry(path=path, sha256=digest, size=len(data)))
    return Manifest(files=entries)


def spec(
    experiment: str = "exp",
    method_id: str = "custom/custom",
    profiles: list[str] | None = None,
    inputs: Inputs | None = None,
    **method_overrides: Any,
) -> JobSpec:
    ref = get_method(method_id).ref().model_copy(update=method_overrides)
    return JobSpec(
        project="proj",
        experiment=experiment,
        method=ref,
        profiles=profiles or ["h200:8"],
        inputs=inputs or Inputs(),
        image="registry.example/train:v1" if method_id == "custom/custom" else "",
        provenance=Provenance(git_commit="a" * 40, client_version="0.1.0"),
        # custom/custom keeps its curves elsewhere by default: it must say where.
        observability_url="https://wandb.example/proj" if method_id == "custom/custom" else "",
    )


def request(rt: Runtime, *, key: str | None = None, **spec_args: Any) -> SubmitRequest:
    experiment = spec_args.get("experiment", "exp")
    method_id = spec_args.get("method_id", "custom/custom")
    return SubmitRequest(
        spec=spec(**spec_args),
        manifest=package(rt, experiment, method_id),
        idempotency_key=key or uuid.uuid4().hex,
    )


def submit(rt: Runtime, user: str = "alice", **spec_args: Any) -> SubmitResponse:
    req = request(rt, **spec_args)
    for digest in req.manifest.digests():  # the submitter sent the files of its package
        blobs.record(rt, user, digest)
    return jobs.submit(rt, user, req)


def run_row(rt: Runtime, run_id: str) -> Run:
    with rt.transaction() as session:
        run = session.get(Run, run_id)
        assert run is not None
        _ = run.attempts, run.events  # load while the session is open
        return run


def schedule(rt: Runtime) -> list[str]:
    """One scheduler pass with starts; the ids of the runs it started."""
    orders = dispatch.schedule_pass(rt)
    for order in orders:
        dispatch.start_attempt(rt, order)
    return [o.run_id for o in orders]


def binding(rt: Runtime, run_id: str, attempt: int = 1, rank: int = 0) -> dict[str, Any]:
    run = run_row(rt, run_id)
    run_dir = dispatch.run_dir_of(rt, run)
    return dict(json.loads(rt.storage.binding_path(run_dir, attempt, rank).read_text()))


def report(
    rt: Runtime,
    run_id: str,
    event: str,
    *,
    attempt: int = 1,
    rank: int = 0,
    exit_code: int | None = None,
    token: str | None = None,
) -> lifecycle.Outcome:
    """A runner's lifecycle event, sent with the token from its binding file."""
    token = token or binding(rt, run_id, attempt, rank)["run_token"]
    ev = LifecycleEvent(
        attempt=attempt,
        node_rank=rank,
        event=event,  # type: ignore[arg-type]
        exit_code=exit_code,
    )
    return lifecycle.handle(rt, run_id, token, ev)


def running_run(rt: Runtime, **spec_args: Any) -> str:
    """A submitted, placed and started run whose runner reported ``running``."""
    run_id = submit(rt, **spec_args).run_id
    assert run_id in schedule(rt)
    report(rt, run_id, "starting")
    report(rt, run_id, "running")
    assert run_row(rt, run_id).status == JobStatus.RUNNING
    return run_id


def insert_run(
    rt: Runtime,
    run_id: str,
    *,
    user: str = "alice",
    status: JobStatus = JobStatus.QUEUED,
    minutes: int = 0,
) -> None:
    """A bare run row in any status (most statuses no API reaches directly), created at
    2025-01-01 plus ``minutes``."""
    with rt.transaction() as session:
        session.add(
            Run(
                id=run_id,
                user=user,
                project="proj",
                experiment="exp",
                method="custom/custom",
                status=status.value,
                spec={},
                manifest={},
                pools=[],
                idempotency_key=run_id,
                reason="",
                created_at=datetime(2025, 1, 1, tzinfo=UTC) + timedelta(minutes=minutes),
            )
        )


def force(rt: Runtime, run_id: str, *path: JobStatus) -> None:
    """Walk a run through ``path`` with the state machine (statuses no API reaches yet)."""
    with rt.transaction() as session:
        run = session.get(Run, run_id)
        assert run is not None
        for dst in path:
            statemachine.transition(session, run, dst, reason="test", actor="test")


def group_exists(pgid: int) -> bool:
    """Whether a process group ``pgid`` has a member left (a runner's, say)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def eventually(check: Callable[[], bool], *, limit_s: float = 30.0, what: str = "") -> None:
    """Wait until ``check()`` holds; the limit only bounds a failure, it asserts no duration."""
    deadline = time.monotonic() + limit_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what or check}")
        time.sleep(0.05)
