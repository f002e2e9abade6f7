"""Benchmark of the refusal of huge unauthenticated bodies; prints one JSON document.

One real server (``python -m starforge.server`` in a fresh home, on 127.0.0.1). Each attack is
sent by a raw socket that pushes the body as fast as the server takes it while reading the
answer, while a prober asks ``GET /api/v1/health`` over and over on a connection of its own.

``submit`` (issue 29): ``POST /api/v1/jobs`` with a 60 MB JSON body (under the route's 64 MB
limit) and no token, declared (``Content-Length``), streamed (chunked) and with a wrong bearer
token. ``ingest`` (issue 10): ``POST /api/v1/runs/{id}/ingest`` with 152 MB and no token,
streamed, then declared (refused from the header: over the ingest limit).

* ``seconds``: the slowest of ``--rounds`` tries, from the request's headers sent to the whole
  answer read. Aim: under 0.05 s for the submit (a 66 MB array took seconds and 1.7 GB), under
  0.1 s for the ingest (was 64 s).
* ``sent_bytes``: how much of the body the server's socket took before the answer.
* ``rss_before`` / ``rss_after``: the server's resident memory (KiB, ``/proc/<pid>/status``)
  before and after all the attacks. Aim: unchanged.
* ``health``: ``/health`` latency (ms) idle, then during the attacks (median, max, count).
  Aim: the same (it stalled 6.4 s).
* ``authenticated``: a submission of ``--auth-mb`` (a manifest of that many bytes, with the
  server's own token) is parsed in a worker thread, off the event loop: its answer's seconds,
  and ``/health`` meanwhile (max_ms: it stalled for the whole parse when FastAPI parsed the body).

Usage: .venv/bin/python bench/security.py [--submit-mb 60] [--ingest-mb 152] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the raw attack client lives with the security tests

from tests.security import attack  # noqa: E402

MB = 1024 * 1024


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def start_server(home: Path) -> tuple[subprocess.Popen[bytes], str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STARFORGE_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "starforge.server", "--home", str(home), "--port", "0"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    info = home / "server" / "server.json"
    deadline = time.monotonic() + 120
    while not info.is_file():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the server did not start")
        time.sleep(0.05)
    return proc, str(json.loads(info.read_text())["url"])


class HealthProbe:
    """``GET /health`` in a loop on its own connection, each answer's latency kept (ms)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.ms: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=60) as http:
            while not self._stop.is_set():
                began = time.perf_counter()
                http.get("/api/v1/health").raise_for_status()
                self.ms.append((time.perf_counter() - began) * 1000)
                time.sleep(0.002)

    def __enter__(self) -> HealthProbe:
        self._thread.start()
        while not self.ms and self._thread.is_alive():  # probing before the attacks begin
            time.sleep(0.001)
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def figures(self) -> dict[str, float]:
        ms = self.ms or [0.0]
        return {
            "median_ms": round(statistics.median(ms), 2),
            "max_ms": round(max(ms), 2),
            "count": len(self.ms),
        }


def figures(answer: attack.Answer) -> dict[str, object]:
    return {"status": answer.status, "seconds": round(answer.seconds, 4), "sent_bytes": answer.sent}


def attacks(url: str, submit_mb: int, ingest_mb: int) -> dict[str, dict[str, object]]:
    jobs, ingest = "/api/v1/jobs", "/api/v1/runs/r-0000000000/ingest"
    as_json = {"Content-Type": "application/json"}
    as_text = {"Content-Type": "text/plain"}
    wrong = {**as_json, "Authorization": "Bearer not-a-token-of-anyone"}
    return {
        "submit_declared": figures(attack.post(url, jobs, total=submit_mb * MB, headers=as_json)),
        "submit_chunked": figures(
            attack.post(url, jobs, total=submit_mb * MB, headers=as_json, chunked=True)
        ),
        "submit_wrong_token": figures(attack.post(url, jobs, total=submit_mb * MB, headers=wrong)),
        "ingest_chunked": figures(
            attack.post(url, ingest, total=ingest_mb * MB, chunked=True, headers=as_text)
        ),
        "ingest_declared": figures(attack.post(url, ingest, total=ingest_mb * MB)),
    }


def big_submission(url: str, token: str, mb: int) -> tuple[dict[str, object], dict[str, float]]:
    """A valid JSON submission of about ``mb`` MB (every file of a large package; the rest of
    it invalid, so admission never starts) sent with a real token, ``/health`` probed meanwhile."""
    entry = {"path": "data/part-000000.jsonl", "sha256": "0" * 64, "size": 1, "executable": False}
    count = mb * MB // (len(json.dumps(entry)) + 2)
    body = json.dumps({"manifest": {"files": [entry] * count}}).encode()
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    with HealthProbe(url) as during, httpx.Client(base_url=url, timeout=300) as http:
        began = time.perf_counter()
        status = http.post("/api/v1/jobs", content=body, headers=headers).status_code
        seconds = time.perf_counter() - began
    return {"status": status, "seconds": round(seconds, 3), "bytes": len(body)}, during.figures()


def worst(name: str, rounds: list[dict[str, dict[str, object]]]) -> dict[str, object]:
    """The slowest round's figures of one attack (every round's status must agree)."""
    statuses = {r[name]["status"] for r in rounds}
    slowest = max(rounds, key=lambda r: float(r[name]["seconds"]))  # type: ignore[arg-type]
    return {**slowest[name], "statuses": sorted(statuses)}  # type: ignore[type-var]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--submit-mb", type=int, default=60)
    parser.add_argument("--ingest-mb", type=int, default=152)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--auth-mb", type=int, default=16)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_server(Path(tmp))
        try:
            attacks(url, 1, 1)  # warm every code path once
            with HealthProbe(url) as idle:
                time.sleep(1.0)
            before = rss_kib(proc.pid)
            with HealthProbe(url) as during:
                rounds = [attacks(url, args.submit_mb, args.ingest_mb) for _ in range(args.rounds)]
            after = rss_kib(proc.pid)
            token = (Path(tmp) / "server" / "local-token").read_text().strip()
            authenticated, while_parsing = big_submission(url, token, args.auth_mb)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
    document = {
        "submit_mb": args.submit_mb,
        "ingest_mb": args.ingest_mb,
        "rounds": args.rounds,
        **{name: worst(name, rounds) for name in rounds[0]},
        "rss_before": before,
        "rss_after": after,
        "health": {"idle": idle.figures(), "during_attacks": during.figures()},
        "authenticated": {**authenticated, "health": while_parsing},
    }
    print(json.dumps(document, indent=2))


if __name__ == "__main__":
    main()
