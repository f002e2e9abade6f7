"""One job process's reporting session: where to send, the step counter, what was dropped.

A :class:`Run` reads the job environment the platform sets (``STARFORGE_ENABLED``,
``STARFORGE_ENDPOINT``, ``STARFORGE_RUN_ID``, ``STARFORGE_TOKEN``, ``FORGE_ATTEMPT``,
``FORGE_OUT_DIR``, and ``STARFORGE_CA_FILE`` when the server's certificate is signed by a CA of
its own). Without a token (a script run by hand, a test) it is inactive and every call
returns at once: no thread, no file, no message. Active, it starts the platform's one background
sender (:class:`starforge.client.sender.Sender`) with a :class:`MetricPacker`, spooling under
the run's ``out`` dir (``RunLayout.report_spool``).

``log`` never raises and never blocks on the network but at a sync step: it flattens, filters and
appends to the sender's queue. The first ``log`` at or past each of ``STARFORGE_SYNC_STEPS`` (a
sweep's rungs) waits, up to :data:`SYNC_TIMEOUT_S`, until the server has it: the server judges
the sweep before it answers, so the variant is stopped or held at the rung. ``step=None`` means
the step after the previous call's (0 first); an explicit step also sets where the counter goes
on. Only the process that created the run reports: a forked child
(a data-loader worker) is silent, and so is every rank but global rank 0 (``RANK``, as torchrun
sets it) of a distributed training.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pydantic_core

from starforge import __version__
from starforge.client.sender import Sender, Spool, Stats, read_beacon
from starforge.contract.layout import REPORT_SPOOL
from starforge.report.batch import MetricPacker
from starforge.report.values import Counts, flatten_metrics, flatten_params

_runs: weakref.WeakSet[Run] = weakref.WeakSet()
SYNC_TIMEOUT_S = 60.0  # how long a log at a sync step waits for the server before going on


def _after_fork_in_child() -> None:
    # A forked child (a data-loader worker) inherits the run but not its sender thread: silence
    # it. Processes started fresh (spawn) report on their own; torchrun's ranks but 0 do not.
    for run in list(_runs):
        run.active = False


os.register_at_fork(after_in_child=_after_fork_in_child)


def _discard(item: Any) -> None:
    return None


def _steps(text: str) -> tuple[int, ...]:
    """``STARFORGE_SYNC_STEPS`` ("100,300") as steps; what is not a step is left out."""
    return tuple(sorted({int(t) for t in text.split(",") if t.strip().isdigit()}))


@dataclass(frozen=True)
class Settings:
    enabled: bool
    endpoint: str
    run_id: str
    token: str
    attempt: int
    spool_dir: Path | None
    storage_root: str = ""  # where a restarted control plane publishes its new address
    ca_file: str = ""  # the CA the server's certificate is checked by ("": the default bundle)
    # Steps whose first log waits until the server has it (a sweep's rungs: it judges there).
    sync_steps: tuple[int, ...] = ()

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        out_dir = env.get("FORGE_OUT_DIR", "")
        # RunLayout.report_spool, found from the job's out dir (the run dir is not in the env).
        spool = env.get("STARFORGE_SPOOL_DIR") or (f"{out_dir}/{REPORT_SPOOL}" if out_dir else "")
        try:
            attempt = max(int(env.get("FORGE_ATTEMPT", "1") or 1), 1)
        except ValueError:
            attempt = 1
        endpoint, run_id, token = (
            env.get("STARFORGE_ENDPOINT", ""),
            env.get("STARFORGE_RUN_ID", ""),
            env.get("STARFORGE_TOKEN", ""),
        )
        switched_on = env.get("STARFORGE_ENABLED", "1") != "0"
        # A distributed training is one trajectory: its global rank 0 alone reports it.
        rank_zero = env.get("RANK", "0").strip() in ("", "0")
        return cls(
            enabled=switched_on and rank_zero and bool(endpoint and run_id and token),
            endpoint=endpoint,
            run_id=run_id,
            token=token,
            attempt=attempt,
            spool_dir=Path(spool) if spool else None,
            storage_root=env.get("FORGE_STORAGE_ROOT", ""),
            ca_file=env.get("STARFORGE_CA_FILE", ""),
            sync_steps=_steps(env.get("STARFORGE_SYNC_STEPS", "")),
        )


class Run:
    def __init__(
        self,
        settings: Settings,
        *,
        flush_interval_s: float = 0.5,
        batch_points: int = 20_000,
        max_memory_points: int = 1_000_000,
        client_factory: Callable[[], Any] | None = None,
    ) -> None:
        self.settings = settings
        self.endpoint = settings.endpoint
        self._client_factory = client_factory or self._client
        self.active = settings.enabled
        self.counts = Counts()
        self._warned = False
        self._step = 0
        self._sync = list(settings.sync_steps)
        self._lock = threading.Lock()
        self.sender: Sender | None = None
        self._put: Callable[[Any], None] = _discard
        if self.active:
            self.sender = Sender(
                self._client_factory,
                self._post,
                packer=MetricPacker(settings.attempt, batch_points),
                spool=Spool(settings.spool_dir) if settings.spool_dir else None,
                flush_interval_s=flush_interval_s,
                max_memory_points=max_memory_points,
                relocate=self._relocate,
                name="starforge-report",
            )
            self.sender.start()
            self._put = self.sender.put
            _runs.add(self)

    def _client(self) -> Any:
        from starforge.client import trust  # imported by the sender thread, not at import
        from starforge.client.http import Client

        return Client(
            self.endpoint,
            run_token=self.settings.token,
            timeout=10.0,
            ca_file=self.settings.ca_file or None,
            ca_setting=trust.JOB_SETTING,
        )

    def _post(self, client: Any, body: dict[str, Any]) -> None:
        # Serialised by pydantic-core from plain data (the server validates it): the GIL the
        # sender thread holds is time the training loop waits.
        client.ingest(self.settings.run_id, pydantic_core.to_json(body, fallback=str))

    def _relocate(self) -> bool:
        """Follow the control plane's beacon: True when it now lives at another address."""
        beacon = read_beacon(self.settings.storage_root)
        if beacon is None or not beacon.url or beacon.url == self.endpoint:
            return False
        self.endpoint = beacon.url
        return True

    @property
    def stats(self) -> Stats:
        return self.sender.stats if self.sender else Stats()

    def log(self, metrics: Mapping[Any, Any], step: int | None = None) -> None:
        """Record ``metrics`` at ``step``; never raises, never waits for the network."""
        if not self.active:
            return
        try:
            if step is None:
                step = self._step
            elif type(step) is not int:
                step = int(step)
            self._step = step + 1
            values: dict[str, float] = {}
            for key, value in metrics.items():  # the common case: a flat dict of finite floats
                if type(value) is not float or type(key) is not str or value - value != 0.0:
                    values = self._slow_values(metrics, step)
                    break
                values[key] = value
            if values and step >= 0:
                self._put({"step": step, "t": time.time(), "values": values})
                if self._sync and step >= self._sync[0]:
                    while self._sync and step >= self._sync[0]:
                        self._sync.pop(0)
                    self.flush(SYNC_TIMEOUT_S)  # the server judges this rung before we go on
        except Exception as exc:  # whatever the caller passed, training goes on
            self._note(f"log() ignored a call it could not read: {exc!r}")

    def _slow_values(self, metrics: Mapping[Any, Any], step: int) -> dict[str, float]:
        """Nested mappings, other number types, values to drop (warned about once)."""
        counts = self.counts
        dropped = counts.nonfinite + counts.invalid
        values = flatten_metrics(metrics, counts)
        if counts.nonfinite + counts.invalid != dropped and not self._warned:
            self._warn_dropped(step)
        return values

    def log_hparams(self, params: Mapping[Any, Any]) -> None:
        ignored = "log_hparams() ignored a call it could not read"
        self._put_record("hparams", lambda: flatten_params(params), ignored)

    def log_meta(self, meta: Mapping[str, Any]) -> None:
        self._put_record("meta", lambda: dict(meta), "metadata ignored")

    def _put_record(self, kind: str, read: Callable[[], Any], ignored: str) -> None:
        """Queue ``(kind, read())``; a value it cannot read is noted, never raised."""
        if not self.active:
            return
        try:
            self._put((kind, read()))
        except Exception as exc:  # whatever the caller passed, training goes on
            self._note(f"{ignored}: {exc!r}")

    def started(self) -> None:
        self.log_meta(
            {
                "sdk": f"starforge.report {__version__}",
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "python": sys.version.split()[0],
                "attempt": self.settings.attempt,
                "started_at": datetime.now(UTC).isoformat(),
            }
        )

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until everything logged so far reached the server (False on timeout)."""
        if not self.active or self.sender is None:
            return True
        return self.sender.flush(timeout_s)

    def finish(self, timeout_s: float = 10.0) -> None:
        """Send what is left (spooling what cannot be sent in time) and stop the sender."""
        with self._lock:
            if not self.active or self.sender is None:
                self.active = False
                return
            self.log_meta(
                {
                    "finished_at": datetime.now(UTC).isoformat(),
                    "dropped_nonfinite": self.counts.nonfinite,
                    "dropped_invalid": self.counts.invalid,
                }
            )
            self.active = False
            self.sender.close(timeout_s)
        stats = self.sender.stats
        if self.counts.nonfinite or self.counts.invalid:
            self._note(
                f"dropped {self.counts.nonfinite} non-finite and {self.counts.invalid} "
                "non-numeric value(s) in all"
            )
        if stats.points_spooled and stats.last_error:
            where = self.settings.spool_dir
            self._note(
                f"{stats.points_spooled} point(s) could not be sent ({stats.last_error}); they "
                f"wait in {where}: the runner sends them after this job, and the server takes "
                "what is left when the run ends"
            )

    def _warn_dropped(self, step: int) -> None:
        self._warned = True
        c = self.counts
        what = (
            f"a non-finite value of {c.nonfinite_key!r}"
            if c.nonfinite
            else f"a value of {c.invalid_key!r} that is not a number"
        )
        self._note(
            f"dropped {what} at step {step}; such values are not stored (finish() reports how many)"
        )

    @staticmethod
    def _note(message: str) -> None:
        with contextlib.suppress(Exception):  # a closed stderr must not matter either
            print(f"[starforge.report] {message}", file=sys.stderr, flush=True)
