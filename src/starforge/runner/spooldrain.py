"""The curves a job could not deliver, sent by its runner after the job ended.

The report SDK spools what the server did not take (it was down when the job finished) under the
run's ``out`` dir, for "the run's next attempt"; a succeeded run has none. So node 0's runner,
once the job has exited and before it reports the exit (the server takes no metrics from a run
that ended), sends every spooled body itself, with the job's token, in order: a failed try is
retried with exponential backoff (``MIN_BACKOFF_S`` doubling to ``MAX_BACKOFF_S``), following the
control plane's beacon when it moved, for at most the beacon's ``report_drain_s`` (the server's
setting). A spool file is removed once every body in it was taken. A server that refuses the job's
token (a newer attempt holds the run) stops the drain at once; a body it refuses as malformed is
dropped. Whatever is left when the time runs out stays where it is: the server ingests it when it
ends the run (:mod:`starforge.server.services.observability.spooled`). Points are stored by (run,
key, step), so a body that both the runner and the server deliver is stored once.

The spool folder is the job's, and the runner may be root: it is read through
:mod:`starforge.contract.spoolfiles` (no link followed, nothing written, files only removed).
With nothing spooled (the usual case) this costs a failed ``open`` and starts no thread.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from starforge.client import trust
from starforge.client.http import Client
from starforge.client.sender import read_beacon
from starforge.contract import spoolfiles
from starforge.contract.env import Binding
from starforge.contract.errors import (
    Forbidden,
    NotFound,
    ServerError,
    ServerUnreachable,
    StarForgeError,
    Unauthorized,
)
from starforge.contract.layout import RunLayout

DEFAULT_LIMIT_S = 60.0  # when no beacon names the server's report_drain_s
MIN_BACKOFF_S = 0.5
MAX_BACKOFF_S = 5.0


@dataclass
class Drained:
    """What one drain did (also what the runner's log says)."""

    files: int = 0  # spool files found
    points_sent: int = 0
    points_dropped: int = 0  # in bodies the server refused as malformed
    tries_failed: int = 0
    removed: int = 0  # files whose every body was taken
    stopped: str = ""  # why it stopped before the end ("" when it emptied the spool)


class _Courier:
    """Posts bodies to the control plane, following its beacon; one client, made when needed."""

    def __init__(self, binding: Binding, client_factory: Callable[[str], Client] | None) -> None:
        self.binding = binding
        self.url = binding.endpoint
        self._factory = client_factory or self._client
        self._client_now: Client | None = None

    def _client(self, url: str) -> Client:
        """The job's token (ingest takes no other), trusting the server's CA as the runner does."""
        b = self.binding
        return Client(
            url,
            run_token=b.job_token,
            timeout=10.0,
            ca_pem=b.tls_ca,
            ca_setting=trust.SERVER_SETTING,
        )

    def post(self, line: bytes) -> None:
        if self._client_now is None:
            self._client_now = self._factory(self.url)
        self._client_now.ingest(self.binding.run_id, line)

    def follow_beacon(self) -> None:
        beacon = read_beacon(self.binding.storage_root)
        if beacon is not None and beacon.url and beacon.url != self.url:
            self.url = beacon.url
            self.close()

    def close(self) -> None:
        if self._client_now is not None:
            self._client_now.close()
            self._client_now = None


def limit_s(binding: Binding) -> float:
    """How long the server lets a runner send spooled curves (its beacon), else the default."""
    beacon = read_beacon(binding.storage_root)
    return beacon.report_drain_s if beacon is not None else DEFAULT_LIMIT_S


def drain(
    binding: Binding,
    say: Callable[[str], None],
    *,
    limit: float | None = None,
    client_factory: Callable[[str], Client] | None = None,
    min_backoff_s: float = MIN_BACKOFF_S,
) -> Drained:
    """Send the job's spooled bodies (node 0 of a reporting run only); see the module's doc."""
    done = Drained()
    if binding.node_rank != 0 or not (binding.job_token and binding.endpoint):
        return done
    layout = RunLayout(Path(binding.run_dir))
    try:
        files = spoolfiles.read(layout.out)
    except OSError as exc:
        say(f"cannot read the job's report spool: {exc}")
        return done
    if not files:
        return done
    done.files = len(files)
    deadline = time.monotonic() + (limit_s(binding) if limit is None else limit)
    courier = _Courier(binding, client_factory)
    try:
        for spooled in files:
            if not _send_file(spooled, courier, done, deadline, min_backoff_s):
                break
            spoolfiles.remove(layout.out, [spooled.name])
            done.removed += 1
    except Exception as exc:  # the run ends whatever happens here: the server has the rest
        done.stopped = f"sending stopped: {exc!r}"
    finally:
        with contextlib.suppress(Exception):
            courier.close()
    say(_summary(done, layout.report_spool))
    return done


def _send_file(
    spooled: spoolfiles.SpoolFile,
    courier: _Courier,
    done: Drained,
    deadline: float,
    min_backoff_s: float,
) -> bool:
    """Every body of one file, in order; False when the drain must stop (why: ``done.stopped``)."""
    for line, body in spooled.bodies():
        points = spoolfiles.points_of(body)
        backoff = min_backoff_s
        while True:
            try:
                courier.post(line)
                done.points_sent += points
                break
            except (Forbidden, NotFound, Unauthorized) as exc:  # the run is not the job's now
                done.stopped = f"the server refuses the job's token ({exc.message})"
                return False
            except (ServerUnreachable, ServerError) as exc:
                done.tries_failed += 1
                if time.monotonic() + backoff > deadline:
                    done.stopped = f"the server did not take them in time ({exc.message})"
                    return False
                time.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
                courier.follow_beacon()
            except StarForgeError:  # refused for good (malformed): resending changes nothing
                done.points_dropped += points
                break
    return True


def _summary(done: Drained, folder: Path) -> str:
    sent = f"sent {done.points_sent} point(s) the job had spooled"
    if done.points_dropped:
        sent += f" ({done.points_dropped} refused by the server as malformed)"
    if not done.stopped:
        return sent
    left = done.files - done.removed
    return (
        f"{sent}; {done.stopped}: {left} spool file(s) stay in {folder} for the server, which "
        "stores them when the run ends"
    )
