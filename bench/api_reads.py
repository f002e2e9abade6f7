"""Benchmarks of reads through the API; prints one JSON document.

One real embedded server (``sf server start``: SQLite, the virtual inventory) with ``--runs``
runs in its database, seeded through the ORM beside the running server: every ``--queued-every``
th run is queued with pools that can never be placed (three h200 nodes, where there are two), so
it stays queued and the scheduler explains it, the others have succeeded.

* ``sf_job_ls``: wall time of ``sf job ls`` (a fresh CLI process each, the real client, default
  limit 50), median and p90 over ``--calls``; ``sf_help`` beside it is the CLI's own start-up.
* ``get_queued_run``: ``GET /api/v1/runs/{id}`` of one queued run through the real client,
  median and p90 over ``--calls`` in one process (no CLI start-up in the figure).

Usage: .venv/bin/python bench/api_reads.py [--runs 1000] [--queued-every 10] [--calls 20]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

SF = [sys.executable, "-m", "starforge.cli.main"]


def sf(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SF, *args], check=True, capture_output=True, text=True)


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 1),
        "p90_ms": round(ordered[int(0.9 * (len(ordered) - 1))] * 1000, 1),
        "n": len(ordered),
    }


def stored(**columns: Any) -> dict[str, Any]:
    """JSON columns as this version of the schema keeps them: JSON columns, or text columns named
    ``*_json`` before them (so the same script measures the code before and after)."""
    from starforge.server.db.models import Run

    if hasattr(Run, "spec_json"):
        return {f"{name}_json": json.dumps(value) for name, value in columns.items()}
    return columns


def seed(home: Path, user: str, runs: int, queued_every: int) -> str:
    """Insert ``runs`` runs of ``user``; returns the id of the newest queued one."""
    from starforge.contract.profiles import Pool
    from starforge.server.db.engine import make_engine, make_sessions
    from starforge.server.db.models import Event, Run
    from starforge.server.settings import load_settings

    engine = make_engine(load_settings(home).db_url)
    never_fits = [Pool(name="all", profile="h200", series="h200", nodes=3, gpus_per_node=8)]
    start = datetime.now(UTC) - timedelta(hours=1)
    queued = ""
    rows: list[Any] = []
    for i in range(runs):
        run_id = f"r-bench{i:05d}"
        waiting = i % queued_every == 0
        status = "queued" if waiting else "succeeded"
        at = start + timedelta(seconds=i)
        rows.append(
            Run(
                id=run_id,
                user=user,
                project="bench",
                experiment=f"e{i % 7}",
                method="custom/custom",
                status=status,
                reason="waiting for the scheduler" if waiting else "the run ended",
                priority=0,
                **stored(
                    spec={"profiles": ["h200:24"]},
                    manifest={},
                    pools=[p.model_dump() for p in never_fits],
                ),
                gpus=24,
                idempotency_key=run_id,
                current_attempt=0,
                created_at=at,
                updated_at=at,
                ended_at=None if waiting else at,
            )
        )
        rows.append(Event(run_id=run_id, at=at, src=None, dst="queued", reason="", actor=user))
        queued = run_id if waiting else queued
    with make_sessions(engine).begin() as session:
        session.add_all(rows)
    engine.dispose()
    return queued


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--queued-every", type=int, default=10)
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        os.environ["STARFORGE_HOME"] = str(home)
        os.environ.pop("STARFORGE_SERVER", None)
        sf("server", "start")
        try:
            from starforge.client import config
            from starforge.client.http import Client

            found = config.read_server_file()
            assert found is not None, "the embedded server wrote no server.json"
            with Client(str(found["url"]), token=config.read_local_token()) as client:
                user = client.whoami().user
                queued = seed(home, user, args.runs, args.queued_every)
                deadline = time.monotonic() + 30
                while client.get_run(queued).pending is None:  # until a pass has explained it
                    assert time.monotonic() < deadline, "no scheduler pass explained the queue"
                    time.sleep(0.1)
                gets = []
                for _ in range(args.calls):
                    began = time.perf_counter()
                    view = client.get_run(queued)
                    gets.append(time.perf_counter() - began)
            listed, helps = [], []
            for _ in range(args.calls):
                began = time.perf_counter()
                out = sf("job", "ls")
                listed.append(time.perf_counter() - began)
                began = time.perf_counter()
                sf("--help")
                helps.append(time.perf_counter() - began)
        finally:
            sf("server", "stop")
    print(
        json.dumps(
            {
                "runs_in_database": args.runs,
                "queued": len(range(0, args.runs, args.queued_every)),
                "sf_job_ls": {**summary(listed), "rows_shown": len(out.stdout.splitlines())},
                "sf_help": summary(helps),
                "get_queued_run": {**summary(gets), "reason": view.reason},
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
