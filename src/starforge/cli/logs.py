"""Printing and following a run's logs (``sf job logs``, ``sf submit --follow``)."""

from __future__ import annotations

import time

from starforge.cli.output import out
from starforge.client.http import Client
from starforge.contract.api import RunView

FOLLOW_WAIT_S = 10.0


def read_attempt(client: Client, run_id: str, attempt: int) -> tuple[str, int, bool]:
    data, offset = [], 0
    while True:
        chunk = client.logs(run_id, attempt=attempt, offset=offset)
        data.append(chunk.data)
        if chunk.offset == offset or chunk.final:
            return "".join(data), chunk.offset, chunk.final
        offset = chunk.offset


def print_history(client: Client, run: RunView) -> None:
    """Every attempt's whole log, each after a separator line (``-n 0``)."""
    numbers = [a.number for a in run.attempts] or [1]
    for number in numbers:
        if len(numbers) > 1:
            out.raw(f"──── attempt {number} ────\n")
        text, _, _ = read_attempt(client, run.run_id, number)
        out.raw(text)


def tail_and_follow(client: Client, run: RunView, lines: int, follow: bool) -> str:
    """Print the last ``lines`` lines of the current attempt (0 = every attempt's whole log),
    then follow it until the run ends. Returns the run's final status."""
    if not run.attempts:
        if not follow:
            out.info(f"run {run.run_id} is {run.status}: no log yet ({run.reason})")
            return run.status
        out.info(f"run {run.run_id} is {run.status}: {run.reason}; waiting for it to start")
    attempt: int | None = run.attempts[-1].number if run.attempts else None
    offset, final = 0, run.status.is_terminal and not run.attempts
    if attempt is not None and lines == 0:
        print_history(client, run)
        _, offset, final = read_attempt(client, run.run_id, attempt)
    elif attempt is not None:
        text, offset, final = read_attempt(client, run.run_id, attempt)
        kept = text.splitlines(keepends=True)[-lines:] if lines > 0 else []
        out.raw("".join(kept))
    status = run.status
    while follow and not final:
        chunk = client.logs(run.run_id, attempt=attempt, offset=offset, wait=FOLLOW_WAIT_S)
        status, final = chunk.status, chunk.final
        if attempt is None:
            if chunk.attempt < 1:  # still queued: nothing to show yet
                continue
            attempt = chunk.attempt
        out.raw(chunk.data)
        offset = chunk.offset
        if not chunk.data and chunk.attempts > attempt:  # a retry or resume started
            attempt, offset = attempt + 1, 0
            out.raw(f"──── attempt {attempt} ────\n")
    return status


def wait_for_end(client: Client, run: RunView, poll_s: float = 0.5) -> str:
    """Wait quietly until the run is final (``--follow --json``); returns its final status."""
    while not run.status.is_terminal:
        time.sleep(poll_s)
        run = client.get_run(run.run_id)
    return run.status
