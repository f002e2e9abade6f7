"""Printing and following a run's logs (``sf job logs``, ``sf submit --follow``).

History without following reads the JSON log endpoint; following reads the Server-Sent Events
stream, which delivers each line once even across reconnects and ends when the run ends. Both
show every node of a multi-node attempt, node r > 0's lines labelled ``[node r]`` (history node by
node, the stream as lines arrive), or one node's alone (``node``).
``sf job logs RUN -n N --no-follow`` usually runs as :mod:`starforge.cli.fastpath` instead; both
read through :mod:`starforge.cli.logtail`, so they print the same bytes.
"""

from __future__ import annotations

import time

from starforge.cli.logtail import attempt_text
from starforge.cli.output import out
from starforge.client.http import Client
from starforge.contract import api
from starforge.contract.api import RunView
from starforge.contract.errors import UsageError


def print_history(client: Client, run: RunView, node: int | None = None) -> None:
    """Every attempt's whole log, each after a separator line (``-n 0``)."""
    numbers = [a.number for a in run.attempts] or [1]
    for number in numbers:
        if len(numbers) > 1:
            out.raw(f"──── attempt {number} ────\n")
        out.raw(attempt_text(client, run.run_id, number, node=node))


def tail_and_follow(
    client: Client, run: RunView, lines: int, follow: bool, node: int | None = None
) -> str:
    """Print the last ``lines`` lines of the current attempt (of each of its nodes; 0 = every
    attempt's whole log), then follow it until the run ends. Returns the run's final status."""
    if follow:
        return follow_stream(client, run, lines, node=node)
    if not run.attempts:
        out.info(f"run {run.run_id} is {run.status}: no log yet ({run.reason})")
        return run.status
    if lines == 0:
        print_history(client, run, node=node)
    else:
        out.raw(attempt_text(client, run.run_id, run.attempts[-1].number, tail=lines, node=node))
    return run.status


def follow_stream(client: Client, run: RunView, lines: int, node: int | None = None) -> str:
    """Follow the run's log over Server-Sent Events until its ``end`` event: from the first
    attempt's beginning (``lines`` = 0) or the current attempt's last ``lines`` lines of each
    node. The stream reconnects by itself after a drop and resumes after the last line printed."""
    stream = client.stream_logs(run.run_id, tail=None if lines <= 0 else lines, node=node)
    status, told_waiting, first = str(run.status), False, True
    for event in stream:
        data = event.json()
        if event.event == api.SSE_LOG:
            if node is not None and data.get("node", 0) != node:  # a server from before nodes
                raise UsageError(
                    f"the server cannot follow node {node}'s log alone (it sent node "
                    f"{data.get('node', 0)}'s)",
                    hint="upgrade the server, or omit --node to follow node 0's log",
                )
            out.raw(data["text"])
        elif event.event == api.SSE_ATTEMPT:
            out.raw(f"──── attempt {data['attempt']} ────\n")
        elif event.event == api.SSE_STATUS:
            status = data["status"]
            if first and lines <= 0 and data["attempts"] > 1:
                out.raw("──── attempt 1 ────\n")
            if data["attempts"] == 0 and not told_waiting and status == "queued":
                out.info(f"run {run.run_id} is {status}: {data['reason']}; waiting for it to start")
                told_waiting = True
            first = False
        elif event.event == api.SSE_END:
            return str(data["status"])
    return status


def wait_for_end(client: Client, run: RunView, poll_s: float = 0.5) -> str:
    """Wait quietly until the run is final (``--follow --json``); returns its final status."""
    while not run.status.is_terminal:
        time.sleep(poll_s)
        run = client.get_run(run.run_id)
    return run.status
