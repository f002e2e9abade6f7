"""A runner that starts, records its start, succeeds and exits (run as a script, not collected).

Standard library only, so each start costs a few milliseconds: the two-server test starts 200 of
them. It writes its runner record, appends ``<run_id> <attempt> <pid>`` to the file named by
``SF_TEST_STARTS`` (one short ``O_APPEND`` write, so lines from concurrent runners never
interleave), writes its exit record, and reports ``starting``, ``running`` and ``exited 0`` to
its endpoint. A report that cannot be delivered (the leader that placed it was killed) is
skipped: the exit record settles the run.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path


def post(b: dict[str, object], event: str, **extra: object) -> None:
    body = {"attempt": b["attempt"], "node_rank": b["node_rank"], "event": event, **extra}
    request = urllib.request.Request(
        f"{b['endpoint']}/api/v1/runs/{b['run_id']}/lifecycle",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "X-StarForge-Run-Token": str(b["run_token"])},
        method="POST",
    )
    try:
        urllib.request.urlopen(request, timeout=30).read()
    except (urllib.error.URLError, OSError) as exc:
        print(f"quick runner: could not report {event}: {exc}", flush=True)


def write_json(path: Path, data: dict[str, object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({**data, "at": time.time()}))
    os.replace(tmp, path)


def main(binding_path: str) -> int:
    b = json.loads(Path(binding_path).read_text())
    state = Path(str(b["run_dir"])) / "state"
    node = f"attempt-{b['attempt']}.node-{b['node_rank']}"
    # First, as the real runner does: a leader that died before recording this start adopts it.
    write_json(
        state / f"{node}.runner.json",
        {"pid": os.getpid(), "pgid": os.getpgid(0), "host": socket.gethostname()},
    )
    fd = os.open(os.environ["SF_TEST_STARTS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, f"{b['run_id']} {b['attempt']} {os.getpid()}\n".encode())
    os.close(fd)
    post(b, "starting")
    post(b, "running")
    write_json(state / f"{node}.exit.json", {"exit_code": 0})
    post(b, "exited", exit_code=0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
