"""The runtime: everything a service needs, built once per server process.

It holds the settings, the database session factory, the storage, the executor (``executor:
local|slurm``), the inventory (the settings', or what the executor reports, refreshed before
each scheduler pass) and the scheduler's wake-up signal. Services take it as their first
argument; routers get it from the app. ``wake_scheduler`` is safe to call from any thread
(request handlers run in a thread pool).
"""

from __future__ import annotations

import asyncio
import functools
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from starforge.contract.packs import Extent
from starforge.server import fence
from starforge.server.db import packs
from starforge.server.db.engine import make_engine, make_sessions, migrate, read_only
from starforge.server.db.models import utcnow
from starforge.server.executors.base import Executor, SupportsInventory
from starforge.server.executors.local import LocalExecutor
from starforge.server.executors.slurm import SlurmExecutor
from starforge.server.settings import NodeDef, Settings
from starforge.server.storage import Storage

if TYPE_CHECKING:
    from starforge.server.services.scheduling.queue import QueueMemo
    from starforge.server.services.scheduling.scheduler import QueuePass


def free_port() -> int:
    """A TCP port that was free a moment ago on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Runtime:
    settings: Settings
    engine: Engine
    sessions: sessionmaker[Session]
    storage: Storage
    executor: Executor
    inventory: list[NodeDef]
    url: str = ""
    # Where a multi-node attempt's rank 0 listens; replaceable so unit tests open no sockets.
    pick_port: Callable[[], int] = field(default=free_port)
    started_at: datetime = field(default_factory=utcnow)
    # Held by each scheduler pass and reconciler tick so the two never interleave their
    # decide-then-act steps (e.g. the reconciler seeing a node that is being started).
    loop_lock: threading.Lock = field(default_factory=threading.Lock)
    wakeups: int = 0
    # Wake-ups that may free or change capacity (a run ended, a stop, a quota edit): every one
    # but an arrival. The scheduler never holds these back (``loops/scheduler``).
    urgent_wakeups: int = 0
    # Whether this process runs the scheduler and reconciler (``loops/leader``).
    leader: bool = False
    # The scheduler's latest pass: what views of queued runs read (they never plan themselves).
    queue_pass: QueuePass | None = None
    # The queued runs as the scheduler last parsed them (``services/scheduling/queue``): read, not
    # parsed.
    queue_memo: QueueMemo | None = None
    _loop: asyncio.AbstractEventLoop | None = None
    _wake: asyncio.Event | None = None

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        """A session inside one transaction: committed on success, rolled back on error. In a
        pass of the leader's loops, first fenced by its term (:mod:`starforge.server.fence`)."""
        with self.sessions.begin() as session:
            term = fence.TERM.get()
            if term is not None:
                fence.check(session, term)
            yield session

    @contextmanager
    def reading(self) -> Iterator[Session]:
        """A session inside one read-only transaction (rolled back): a consistent snapshot that
        never waits for, nor holds back, a writer on SQLite."""
        with read_only(self.engine) as conn, Session(bind=conn) as session:
            yield session

    def refresh_inventory(self) -> bool:
        """Take the executor's view of its nodes (down or drained ones left out), if it has one.

        False when the executor cannot see its nodes now (Slurm's controller is down): the
        inventory is kept as it was, and nothing should be placed until it answers again."""
        if isinstance(self.executor, SupportsInventory):
            nodes = self.executor.inventory()
            if nodes is None:
                return False
            self.inventory = nodes
        return True

    def bind_loop(self, loop: asyncio.AbstractEventLoop, wake: asyncio.Event) -> None:
        self._loop, self._wake = loop, wake

    def unbind_loop(self) -> None:
        self._loop, self._wake = None, None

    def wake_scheduler(self, *, arrival: bool = False) -> None:
        """Ask for a scheduler pass now (from any thread); counted for tests. ``arrival``: only
        new runs were queued (a submit), which a busy scheduler may gather into one pass."""
        self.wakeups += 1
        if not arrival:
            self.urgent_wakeups += 1
        loop, wake = self._loop, self._wake
        if loop is None or wake is None or loop.is_closed():
            return
        if wake.is_set():  # a pass is due already: one wake-up serves a whole burst
            return
        try:
            if loop is _running_loop():
                wake.set()
            else:
                loop.call_soon_threadsafe(wake.set)
        except RuntimeError:  # the loop is shutting down
            pass


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _locate_packed(engine: Engine, digests: list[str]) -> dict[str, Extent]:
    """Where the packed ones of ``digests`` lie, read in a read-only transaction of its own:
    what :class:`Storage` asks (``db.packs``)."""
    if not digests:
        return {}
    with read_only(engine) as conn, Session(bind=conn) as session:
        return packs.locate(session, digests)


def build_runtime(
    settings: Settings, *, executor: Executor | None = None, url: str = ""
) -> Runtime:
    """Connect the database (migrating it), prepare storage and the executor."""
    engine = make_engine(settings.db_url)
    migrate(engine)
    storage = Storage(settings.storage, locate=functools.partial(_locate_packed, engine))
    # Jobs of uids of their own, or of their members' Unix accounts: nothing of the store is
    # theirs to read (the runner or, on Slurm, the server stages what a run needs into it).
    if settings.job_uids or settings.slurm_accounts:
        storage.close_private()
    storage.root.mkdir(parents=True, exist_ok=True)
    rt = Runtime(
        settings=settings,
        engine=engine,
        sessions=make_sessions(engine),
        storage=storage,
        executor=executor or make_executor(settings),
        inventory=list(settings.nodes),
        url=url or settings.url,
    )
    rt.refresh_inventory()
    return rt


def make_executor(settings: Settings) -> Executor:
    """The executor ``settings.executor`` names."""
    if settings.executor == "slurm":
        # Pyxis containers see the storage root at the same path (the shared filesystem).
        return SlurmExecutor(settings.slurm, settings.runner_command, [str(settings.storage)])
    return LocalExecutor(settings.runner_command, warm_trainer=settings.warm_trainer)
