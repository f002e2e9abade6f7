"""A year of history: ``sf admin usage`` and the server's memory with ``--runs`` runs; prints JSON.

One real embedded server (``sf server start``: SQLite, the virtual inventory). ``--runs`` runs are
seeded beside it, spread over ``--days`` days, among ``--users`` users and their projects: every
``--queued-every``-th run is queued with pools that can never be placed (so it stays queued and
every scheduler pass explains it), the others ended after one attempt (every 10th after two) of 1
to 8 GPUs lasting minutes to a day and a half. An ended attempt is written as the server writes
one when it ends (:func:`starforge.server.services.scheduling.accounting.attempt_ended`, where this
version has it), so the figures measure what the server would hold after that year.

* ``sf_admin_usage``: wall time of ``sf admin usage`` (a fresh CLI process each: every (day,
  user, project) of the year), median and p90 over ``--calls``; ``sf_admin_usage_by_user``,
  ``..._by_project``, ``..._by_run_last_7_days`` beside it; ``sf_help`` is the anchor (the CLI's
  own start-up, in the same invocation).
* ``server_rss_mb``: the server's ``VmRSS`` once idle after the seeding (a scheduler pass has
  explained the queue), then after the reads (``sf job ls`` and the usage reports), and its peak
  (``VmHWM``) over the whole run; the aim is 200 MB.

Usage: .venv/bin/python bench/usage_history.py [--runs 100000] [--days 365] [--calls 5]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

SF = [sys.executable, "-m", "starforge.cli.main"]
AIM_RSS_MB = 200
AIM_USAGE_MS = 1000
SLOT = {"rank": 0, "pool": "p", "pool_rank": 0, "node": "n0"}  # an attempt's one node


def sf(*args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([*SF, *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"sf {' '.join(args)} exited {done.returncode}: {done.stderr}")
    return done


def timed(calls: int, *args: str) -> dict[str, Any]:
    samples, out = [], ""
    for _ in range(calls):
        began = time.perf_counter()
        out = sf(*args).stdout
        samples.append(time.perf_counter() - began)
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 1),
        "p90_ms": round(ordered[int(0.9 * (len(ordered) - 1))] * 1000, 1),
        "n": len(ordered),
        "lines": len(out.splitlines()),
    }


def rss_mb(pid: int, field: str = "VmRSS") -> float | None:
    """The process's resident set now (``VmHWM``: its peak so far), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return round(int(line.split()[1]) / 1024, 1)
    return None


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def wait_idle(pid: int, limit_s: float = 120.0) -> None:
    deadline = time.monotonic() + limit_s
    before = cpu_ticks(pid)
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = cpu_ticks(pid)
        if now - before <= 2:
            return
        before = now


def seed(home: Path, admin: str, args: argparse.Namespace) -> str:
    """Insert the runs, their attempts and events; returns the id of the newest queued run."""
    import sqlalchemy as sa

    from starforge.contract.profiles import Pool
    from starforge.server.db.engine import make_engine
    from starforge.server.db.models import Attempt, Event, Run
    from starforge.server.services.scheduling import accounting
    from starforge.server.settings import load_settings

    ended_hook = getattr(accounting, "attempt_ended", None)  # None: a version without summaries
    rng = random.Random(7)
    users = [admin, *(f"user{i:02d}" for i in range(args.users - 1))]
    projects = {u: [f"{u}-p{j}" for j in range(1 + i % 3)] for i, u in enumerate(users)}
    never_fits = [
        Pool(name="all", profile="h200", series="h200", nodes=3, gpus_per_node=8).model_dump()
    ]
    now = datetime.now(UTC)
    first = now - timedelta(days=args.days)
    step = timedelta(days=args.days) / args.runs
    engine = make_engine(load_settings(home).db_url)
    queued = ""
    runs: list[dict[str, Any]] = []
    attempts: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    for i in range(args.runs):
        run_id = f"r-hist{i:06d}"
        user = users[i % len(users)]
        at = first + step * i
        waiting = i % args.queued_every == 0
        gpus = rng.choice((1, 1, 2, 4, 8))
        pools = [
            Pool(name="p", profile="h200", series="h200", nodes=1, gpus_per_node=gpus).model_dump()
        ]
        tries = 0 if waiting else (2 if i % 10 == 1 else 1)
        start, end = at, at
        for number in range(1, tries + 1):
            start = end + timedelta(minutes=1)
            end = min(start + timedelta(minutes=rng.uniform(2, 36 * 60)), now)
            attempts.append(
                {
                    "run_id": run_id,
                    "number": number,
                    "executor_ref": f"local:{i}",
                    "allocation": [{**SLOT, "gpus": [*range(gpus)]}],
                    "nodes": {},
                    "started_at": start,
                    "ended_at": end,
                    "exit_code": 0,
                    "end_reason": "completed",
                    "log_path": "",
                }
            )
        runs.append(
            {
                "id": run_id,
                "user": user,
                "project": projects[user][i % len(projects[user])],
                "experiment": f"e{i % 7}",
                "method": "custom/custom",
                "status": "queued" if waiting else "succeeded",
                "reason": "waiting for the scheduler" if waiting else "the run ended",
                "priority": 0,
                "spec": {"profiles": ["h200:24" if waiting else f"h200:{gpus}"]},
                "manifest": {},
                "pools": never_fits if waiting else pools,
                "gpus": 24 if waiting else gpus,
                "idempotency_key": run_id,
                "current_attempt": tries,
                "created_at": at,
                "updated_at": end,
                "started_at": None if waiting else attempts[-1]["started_at"],
                "ended_at": None if waiting else end,
                "end_reason": None if waiting else "completed",
                "exit_code": None if waiting else 0,
            }
        )
        event = {"run_id": run_id, "at": at, "src": None, "dst": "queued", "reason": ""}
        events.append({**event, "actor": user})
        queued = run_id if waiting else queued
    with engine.begin() as conn:
        conn.execute(sa.insert(Run.__table__), runs)
        conn.execute(sa.insert(Attempt.__table__), attempts)
        conn.execute(sa.insert(Event.__table__), events)
        if ended_hook is not None:
            by_id = {r["id"]: r for r in runs}
            for a in attempts:
                r = by_id[a["run_id"]]
                ended_hook(
                    conn, r["user"], r["project"], r["pools"], a["allocation"],
                    a["started_at"], a["ended_at"],
                )  # fmt: skip
    engine.dispose()
    return queued


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--queued-every", type=int, default=10)
    parser.add_argument("--calls", type=int, default=5)
    args = parser.parse_args()
    report: dict[str, Any] = {"runs_in_database": args.runs, "days": args.days}
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
            pid = int(found["pid"])
            with Client(str(found["url"]), token=config.read_local_token()) as client:
                began = time.perf_counter()
                queued = seed(home, client.whoami().user, args)
                report["seed_s"] = round(time.perf_counter() - began, 1)
                deadline = time.monotonic() + 120
                while client.get_run(queued).pending is None:  # a pass has explained the queue
                    assert time.monotonic() < deadline, "no scheduler pass explained the queue"
                    time.sleep(0.2)
            wait_idle(pid)
            rss = {"idle_after_seeding": rss_mb(pid)}
            week = (datetime.now(UTC) - timedelta(days=7)).date().isoformat()
            report["sf_admin_usage"] = timed(args.calls, "admin", "usage")
            report["sf_admin_usage_by_user"] = timed(args.calls, "admin", "usage", "--by", "user")
            report["sf_admin_usage_by_project"] = timed(
                args.calls, "admin", "usage", "--by", "project"
            )
            report["sf_admin_usage_by_run_last_7_days"] = timed(
                args.calls, "admin", "usage", "--by", "run", "--since", week
            )
            report["sf_job_ls"] = timed(args.calls, "job", "ls")
            report["sf_help"] = timed(args.calls, "--help")
            wait_idle(pid)
            rss["idle_after_reads"] = rss_mb(pid)
            rss["peak"] = rss_mb(pid, "VmHWM")
            report["server_rss_mb"] = {**rss, "aim_mb": AIM_RSS_MB}
            report["aim_usage_ms"] = AIM_USAGE_MS
        finally:
            sf("server", "stop")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
