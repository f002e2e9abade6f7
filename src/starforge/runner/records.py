"""The records a runner leaves beside its node's files, for a server that missed its reports.

The runner record (pid and process group, written first) lets a server that never recorded the
start adopt the node; the exit record (written before the final report) tells how it ended. Both
go through the one atomic writer. Stdlib and the contract only: a cold runner writes its runner
record before it imports the HTTP client (``runner/quick.py``).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from starforge.contract.atomic import write_json_atomic
from starforge.contract.layout import RunLayout
from starforge.contract.states import EndReason
from starforge.runner import slurm


class Node(Protocol):
    """Which node of which attempt (a :class:`~starforge.contract.env.Binding`, or what a quick
    start read of one)."""

    @property
    def run_dir(self) -> str: ...
    @property
    def attempt(self) -> int: ...
    @property
    def node_rank(self) -> int: ...


def log_line(message: str) -> bytes:
    """One line of the runner's own in the attempt's log."""
    return f"[starforge {time.strftime('%H:%M:%S')}] {message}\n".encode()


def base_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The runner's environment without the platform's settings (which are not the job's)."""
    return {k: v for k, v in environ.items() if not k.startswith(("STARFORGE_", "FORGE_"))}


def _layout(binding: Node) -> RunLayout:
    return RunLayout(Path(binding.run_dir))


def exit_record_path(binding: Node) -> Path:
    return _layout(binding).exit_record(binding.attempt, binding.node_rank)


def runner_record_path(binding: Node) -> Path:
    return _layout(binding).runner_record(binding.attempt, binding.node_rank)


def spool_dir(binding: Node) -> Path:
    return _layout(binding).events_spool(binding.attempt, binding.node_rank)


def write_runner_record(binding: Node) -> None:
    """Who runs this node (so a server that never recorded the start can adopt it)."""
    record = {"pid": os.getpid(), "pgid": os.getpgid(0), "host": socket.gethostname()}
    record.update(slurm.record_fields(binding, os.environ))  # under Slurm: the job to adopt
    write_json_atomic(runner_record_path(binding), {**record, "at": time.time()})


def write_exit_record(
    binding: Node, exit_code: int, end_reason: EndReason | None, message: str = ""
) -> None:
    """How the node ended; ``message`` says why it failed (a startup failure's cause), for the
    server to show when it learns the exit from this record (it could not be told)."""
    record: dict[str, object] = {
        "exit_code": exit_code,
        "end_reason": end_reason.value if end_reason else None,
        "at": time.time(),
    }
    if message:
        record["message"] = message
    write_json_atomic(exit_record_path(binding), record)
