"""Held job submissions per second through ``slurmrestd``'s unix socket; prints one JSON line.

Run by :mod:`admissions` as the same user as the ``slurmrestd`` it started (its local
authentication takes the uid of the socket's peer, and it refuses to run as root), so this
script uses the standard library only: it may run under a system interpreter with no venv.

Usage: python3 _slurmrest_client.py SOCKET N CLIENTS
"""

from __future__ import annotations

import http.client
import json
import socket
import sys
import threading
import time

SUBMIT = "/slurm/v0.0.38/job/submit"
JOB = {
    "script": "#!/bin/sh\ntrue\n",
    "job": {
        "name": "bench-held",
        "hold": True,
        "partition": "h200",
        "current_working_directory": "/tmp",
        "environment": {"PATH": "/usr/bin:/bin"},
        "standard_output": "/dev/null",
    },
}


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str) -> None:
        super().__init__("localhost", timeout=60)
        self.unix_path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.unix_path)


def submit(path: str, body: bytes) -> None:
    """One submission on a connection of its own (slurmrestd may close it after answering)."""
    conn = UnixConnection(path)
    try:
        conn.request("POST", SUBMIT, body=body, headers={"Content-Type": "application/json"})
        answer = conn.getresponse()
        payload = json.loads(answer.read())
    finally:
        conn.close()
    if answer.status != 200 or not payload.get("job_id"):
        raise SystemExit(f"slurmrestd refused a submission: {answer.status} {payload}")


def rate(path: str, n_per_client: int, clients: int) -> float:
    body = json.dumps(JOB).encode()
    failures: list[BaseException] = []

    def loop() -> None:
        try:
            for _ in range(n_per_client):
                submit(path, body)
        except BaseException as exc:  # reported below, after every thread ended
            failures.append(exc)

    threads = [threading.Thread(target=loop) for _ in range(clients)]
    began = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise SystemExit(str(failures[0]))
    return clients * n_per_client / (time.perf_counter() - began)


def main() -> None:
    path, n, clients = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    one = rate(path, n, 1)
    many = rate(path, n // clients, clients)
    print(json.dumps({"1_client_per_s": round(one, 1), f"{clients}_clients_per_s": round(many, 1)}))


if __name__ == "__main__":
    main()
