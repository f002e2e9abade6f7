"""A stand-in runner for the server's integration tests (run as a script, not collected).

It speaks the runner's side of the protocol without unpacking or training: reads its binding,
reports ``starting`` and ``running``, waits for SIGTERM, then writes its exit record and reports
``exited`` with code 143. A report that cannot be delivered (the server restarted on another
port) is skipped: the exit record lets the reconciler finish the run.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from starforge.contract.api import API_PREFIX, RUN_TOKEN_HEADER


def main(binding_path: str) -> int:
    b: dict[str, Any] = json.loads(Path(binding_path).read_text())
    url = f"{b['endpoint']}{API_PREFIX}/runs/{b['run_id']}/lifecycle"
    stopping = False

    def on_term(*_: object) -> None:
        nonlocal stopping
        stopping = True

    def post(event: str, **extra: object) -> None:
        body = {"attempt": b["attempt"], "node_rank": b["node_rank"], "event": event, **extra}
        try:
            httpx.post(url, json=body, headers={RUN_TOKEN_HEADER: b["run_token"]}, timeout=30)
        except httpx.HTTPError as exc:
            print(f"fake runner: could not report {event}: {exc}", flush=True)

    signal.signal(signal.SIGTERM, on_term)
    post("starting")
    post("running")
    print(f"fake runner: running as pid {os.getpid()}", flush=True)
    while not stopping:
        time.sleep(0.05)
    print("fake runner: stopping", flush=True)
    record = (
        Path(b["run_dir"]) / "state" / f"attempt-{b['attempt']}.node-{b['node_rank']}.exit.json"
    )
    tmp = record.with_suffix(".tmp")
    tmp.write_text(json.dumps({"exit_code": 143}))
    os.replace(tmp, record)
    post("exited", exit_code=143)
    return 143


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
