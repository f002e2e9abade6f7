"""The control plane on SQLite beside PostgreSQL; prints one JSON document.

For each database, one real server (``python -m starforge.server``, a fresh home, the virtual
inventory) whose default quota lets one run at a time (``max_runs: 1``) and whose first run (a
runner that only sleeps) holds it, so every submission after it is admitted and stays queued
with a reason, and the queue the scheduler re-plans grows as the bench runs:

* ``admissions_per_s``: ``POST /api/v1/jobs`` of a custom/custom run (its one file uploaded
  once), ``--admissions`` of them from one client, then as many again from four clients;
* ``sf_job_ls``: wall time of ``sf job ls`` (a fresh CLI process each, the real client, its
  default limit of 50) with that queue in the database, median and p90 over ``--calls``; and
  ``GET /api/v1/runs`` (limit 50) in one process, without the CLI's start-up.

PostgreSQL is the cluster of ``--database-url`` (a fresh database is created on it and dropped
after), else the one ``scripts/postgres.sh`` runs; with neither, only SQLite is measured.

Usage: .venv/bin/python bench/database.py [--admissions 300] [--calls 15] [--database-url URL]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import yaml
from sqlalchemy import create_engine, text
from sqlalchemy.engine.url import make_url
from sqlalchemy.pool import NullPool

from starforge.catalog.loader import get_method
from starforge.contract.api import API_PREFIX
from starforge.server.db.engine import describe_url

ROOT = Path(__file__).resolve().parents[1]
SF = [sys.executable, "-m", "starforge.cli.main"]


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 1),
        "p90_ms": round(ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))] * 1000, 1),
        "n": len(ordered),
    }


class Server:
    """``python -m starforge.server`` in a fresh home on ``database_url`` (None: SQLite)."""

    def __init__(self, home: Path, database_url: str | None) -> None:
        home.mkdir(parents=True)
        config: dict[str, Any] = {
            "quota_defaults": {"max_runs": 1},
            # The runner of the one run that holds the quota: it sleeps until the bench ends.
            "runner_command": [sys.executable, "-c", "import time; time.sleep(3600)"],
        }
        if database_url:
            config["database_url"] = database_url
        (home / "server.yaml").write_text(yaml.safe_dump(config))
        env = {k: v for k, v in os.environ.items() if not k.startswith("STARFORGE_")}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "starforge.server", "--home", str(home)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        info = home / "server" / "server.json"
        deadline = time.monotonic() + 60
        while not info.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start; see {home}/server/server.log")
            time.sleep(0.05)
        self.url = json.loads(info.read_text())["url"]
        self.token = (home / "server" / "local-token").read_text().strip()

    def client(self) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.token}"}
        return httpx.Client(base_url=self.url + API_PREFIX, headers=headers, timeout=120)

    def stop(self, blocker: str = "") -> None:
        """Stop the server, then the blocker's runner (its own process group)."""
        refs: list[str] = []
        if blocker:
            with self.client() as c:
                for attempt in c.get(f"/runs/{blocker}").json().get("attempts", []):
                    refs += (attempt.get("executor_ref") or "").split(",")
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)
        for ref in filter(None, refs):
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.killpg(int(ref.removeprefix("local:")), signal.SIGKILL)


def submission(c: httpx.Client) -> dict[str, Any]:
    data = b"true\n"
    digest = hashlib.sha256(data).hexdigest()
    c.put(f"/blobs/{digest}", content=data).raise_for_status()
    spec = {
        "project": "bench",
        "experiment": "exp",
        "method": get_method("custom/custom").ref().model_dump(),
        "profiles": ["h200:1"],
        "image": "registry.example/bench:1",
        "provenance": {"git_commit": "b" * 40, "client_version": "0.1.0"},
        "observability_url": "https://wandb.example/bench",
    }
    files = [{"path": "experiments/exp/train.sh", "sha256": digest, "size": len(data)}]
    return {"spec": spec, "manifest": {"files": files}}


def post(c: httpx.Client, body: dict[str, Any]) -> str:
    resp = c.post("/jobs", json={**body, "idempotency_key": uuid.uuid4().hex})
    if resp.is_error:
        raise RuntimeError(f"POST /jobs: {resp.status_code} {resp.text}")
    return str(resp.json()["run_id"])


def hold_the_quota(srv: Server) -> str:
    """Submit the run that holds the one-run quota and wait until it runs; its id."""
    with srv.client() as c:
        run_id = post(c, submission(c))
        deadline = time.monotonic() + 60
        while c.get(f"/runs/{run_id}").json()["status"] != "starting":
            if time.monotonic() > deadline:
                raise RuntimeError(f"{run_id} was not started")
            time.sleep(0.05)
    return run_id


def admissions(srv: Server, n: int) -> dict[str, float]:
    with srv.client() as c:
        body = submission(c)
        began = time.perf_counter()
        for _ in range(n):
            post(c, body)
        one = n / (time.perf_counter() - began)

    def client_loop(count: int) -> None:
        with srv.client() as own:
            for _ in range(count):
                post(own, body)

    threads = [threading.Thread(target=client_loop, args=(n // 4,)) for _ in range(4)]
    began = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    four = 4 * (n // 4) / (time.perf_counter() - began)
    return {"1_client_per_s": round(one, 1), "4_clients_per_s": round(four, 1)}


def listing(srv: Server, calls: int) -> dict[str, Any]:
    env = {**os.environ, "STARFORGE_SERVER": srv.url, "STARFORGE_TOKEN": srv.token}
    cli = []
    for _ in range(calls):
        began = time.perf_counter()
        out = subprocess.run([*SF, "job", "ls"], env=env, check=True, capture_output=True)
        cli.append(time.perf_counter() - began)
    api = []
    with srv.client() as c:
        for _ in range(calls):
            began = time.perf_counter()
            c.get("/runs", params={"limit": 50}).raise_for_status()
            api.append(time.perf_counter() - began)
    rows = len(out.stdout.decode().splitlines())
    return {"sf_job_ls": {**summary(cli), "rows_shown": rows}, "get_runs_50": summary(api)}


def measure(root: Path, database_url: str | None, n: int, calls: int) -> dict[str, Any]:
    srv = Server(root, database_url)
    blocker = ""
    try:
        blocker = hold_the_quota(srv)
        figures: dict[str, Any] = {"admissions_per_s": admissions(srv, n)}
        with srv.client() as c:
            info = c.get("/info").json()
        figures |= listing(srv, calls)
        figures["runs_in_database"] = 1 + n + 4 * (n // 4)
        figures["database"] = info.get("database", "")
    finally:
        srv.stop(blocker)
    return figures


def postgres_cluster(given: str | None) -> str:
    if given:
        return given
    got = subprocess.run(
        ["bash", str(ROOT / "scripts" / "postgres.sh"), "url"], capture_output=True, text=True
    )
    return got.stdout.strip() if got.returncode == 0 else ""


def on_postgres(cluster: str, root: Path, n: int, calls: int) -> dict[str, Any]:
    """The same figures on a fresh database of ``cluster``, dropped afterwards."""
    name = f"sf_bench_{uuid.uuid4().hex[:8]}"
    admin = create_engine(cluster, poolclass=NullPool, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        url = make_url(cluster).set(database=name).render_as_string(hide_password=False)
        return measure(root, url, n, calls)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--admissions", type=int, default=300)
    parser.add_argument("--calls", type=int, default=15)
    parser.add_argument("--database-url", help="a PostgreSQL cluster (a database is made on it)")
    args = parser.parse_args()
    report: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        report["sqlite"] = measure(Path(tmp) / "sqlite", None, args.admissions, args.calls)
        cluster = postgres_cluster(args.database_url)
        if cluster:
            pg = on_postgres(cluster, Path(tmp) / "pg", args.admissions, args.calls)
            report["postgresql"] = pg
        else:
            report["postgresql"] = {
                "skipped": "no PostgreSQL: run scripts/postgres.sh start or pass --database-url"
            }
    report["machine"] = {"cpus": os.cpu_count()}
    if cluster:
        report["postgresql_cluster"] = describe_url(cluster)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
