"""Admissions per second: StarForge's ``POST /api/v1/jobs`` beside Slurm's held ``sbatch``.

StarForge: one real embedded server (``python -m starforge.server``, virtual inventory, real
runners). Two blocker runs hold every GPU first, so every submission is admitted and stays
queued (the scheduler re-plans a growing queue meanwhile); then ``--n`` submissions from one
client, and ``--n`` more spread over 8 concurrent clients (threads, one HTTP connection each).
Beside each rate, the server process's own CPU per admission (``/proc/PID/stat``, utime + stime
of all its threads): on a shared machine the rate moves with the load, the CPU much less.

The anchor, in the same invocation, on the project's Slurm cluster (``scripts/slurm.sh start``;
``--slurm`` starts it when it is not running, and stops it again afterwards): ``sbatch --hold``
of a trivial script, one client and 8 concurrent clients, then ``scancel``; and the same held
job through ``slurmrestd`` (``POST /slurm/v0.0.38/job/submit`` on its unix socket, started here
for the measure; see :func:`slurmrestd`), reported as absent when it is not installed. The
machine's load average is printed with the figures: it is shared.

With ``--database-url`` or ``--servers N`` (N > 1), StarForge runs as N server processes
(default 1) on one PostgreSQL database and one storage root (``docs/deploy.md``, "More than one
server process"), the 8 clients spread over them, and the CPU per admission of PostgreSQL's
backends is reported beside the servers'.

Usage: .venv/bin/python bench/admissions.py [--n 400] [--slurm] [--servers 2 [--database-url URL]]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from resources import INVENTORY, Server, package, post, wait_status

ROOT = Path(__file__).resolve().parents[1]
CLIENTS = 8
CONFIG: dict[str, Any] = {"inventory": INVENTORY, "containers": "none"}  # no registry here
GATED = 'while [[ ! -e "{gates}/$FORGE_RUN_ID" ]]; do sleep 0.05; done\n'


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def cpu_s(pid: int) -> float:
    """The CPU seconds process ``pid`` has used so far (all threads, user + system)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rate(n_per_client: int, clients: int, one: Callable[[int], None]) -> float:
    """Calls per second of ``one(client_index)``, ``n_per_client`` each from ``clients`` threads."""

    def loop(i: int) -> None:
        for _ in range(n_per_client):
            one(i)

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(clients)]
    began = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return clients * n_per_client / (time.perf_counter() - began)


def postgres_cpu_s() -> float:
    """The CPU seconds used so far by the machine's live PostgreSQL processes (its backends)."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                if (entry / "comm").read_text().strip() == "postgres":
                    total += cpu_s(int(entry.name))
    return total


@contextlib.contextmanager
def postgres_database(cluster: str) -> Iterator[str]:
    """The URL of a fresh database on ``cluster``, dropped afterwards."""
    from sqlalchemy import create_engine, make_url, text
    from sqlalchemy.pool import NullPool

    name = f"sf_bench_{uuid.uuid4().hex[:8]}"
    admin = create_engine(cluster, poolclass=NullPool, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(cluster).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def starforge(root: Path, n: int, servers: int = 1, cluster: str = "") -> dict[str, Any]:
    """The figures of one server on SQLite or, given a PostgreSQL ``cluster``, of ``servers``
    processes on one database of it and one storage root, the clients spread over them (as
    behind a load balancer; the single client is always the first server's)."""
    if not cluster:
        return admit(root, n, [CONFIG])
    with postgres_database(cluster) as url:
        shared = {**CONFIG, "database_url": url, "storage_root": str(root / "storage")}
        return admit(root, n, [shared] * servers)


def admit(root: Path, n: int, configs: list[dict[str, Any]]) -> dict[str, Any]:
    srv = Server(root / "admit", configs[0])
    others: list[Server] = []
    on_postgres = "database_url" in configs[0]
    blockers: list[str] = []
    try:
        for i, config in enumerate(configs[1:], 1):
            others.append(Server(root / f"admit-{i}", config, srv.token))
        every = [srv, *others]
        with srv.client() as c:
            gated = package(c, GATED.format(gates=srv.gates))
            blockers = [post(c, gated, "h200:16"), post(c, gated, "h100:2")]
            for run_id in blockers:
                wait_status(c, run_id, {"running"}, poll=0.05)
            trivial = package(c, "true\n")
        clients = [every[i % len(every)].client() for i in range(CLIENTS)]

        def used() -> float:
            return sum(cpu_s(s.proc.pid) for s in every)

        database = postgres_cpu_s if on_postgres else lambda: 0.0
        try:
            cpu, db = used(), database()
            one = rate(n, 1, lambda i: post(clients[i], trivial, "h200:1"))
            cpu, cpu_one, db, db_one = used(), used() - cpu, database(), database() - db
            eight = rate(n // CLIENTS, CLIENTS, lambda i: post(clients[i], trivial, "h200:1"))
            cpu_eight, db_eight = used() - cpu, database() - db
        finally:
            for c in clients:
                c.close()
        with srv.client() as c:
            queued = c.get("/runs", params={"status": "queued", "limit": 1000}).json()["runs"]
    finally:
        for other in others:
            other.stop()
        srv.stop(blockers)
    eights = n // CLIENTS * CLIENTS
    figures: dict[str, Any] = {
        "1_client_per_s": round(one, 1),
        "8_clients_per_s": round(eight, 1),
        "server_cpu_ms_per_admission": {
            "1_client": round(1000 * cpu_one / n, 2),
            "8_clients": round(1000 * cpu_eight / eights, 2),
        },
        "queued_at_the_end": len(queued),
        "aim_per_s": 400,
    }
    if on_postgres:
        figures["server_processes"] = len(every)
        figures["database"] = "postgresql"
        figures["postgres_cpu_ms_per_admission"] = {
            "1_client": round(1000 * db_one / n, 2),
            "8_clients": round(1000 * db_eight / eights, 2),
        }
    return figures


# ---- the anchor: the project's Slurm cluster --------------------------------------------------


class Cluster:
    """The cluster ``scripts/slurm.sh`` runs; started here only when asked and not running."""

    def __init__(self, start: bool) -> None:
        script = ROOT / "scripts" / "slurm.sh"
        conf = subprocess.run([script, "env"], capture_output=True, text=True, check=True)
        self.env = {**os.environ, "SLURM_CONF": conf.stdout.strip().split("=", 1)[1]}
        self.started = False
        if shutil.which("sbatch") is None:
            self.up = False
            return
        self.up = subprocess.run([script, "status"], capture_output=True).returncode == 0
        if not self.up and start:
            subprocess.run([script, "start"], capture_output=True, check=True)
            self.up = self.started = True
        self.script = script

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, env=self.env, capture_output=True, text=True, check=check)

    def wait_empty(self) -> None:
        while self.run("squeue", "-h", "-u", str(os.getuid())).stdout.strip():
            time.sleep(0.05)

    def close(self) -> None:
        if self.started:
            subprocess.run([self.script, "stop"], capture_output=True)


def slurm(cluster: Cluster, n: int) -> dict[str, Any]:
    if not cluster.up:
        return {"measured": False, "why": "Slurm's cluster is not running (rerun with --slurm)"}
    # Its own name: the cancel below must not end another bench's jobs on a shared cluster.
    name = f"sf-bench-admit-{uuid.uuid4().hex[:8]}"
    hold = ("sbatch", "--hold", "-Q", "-J", name, "-o", "/dev/null", "--wrap", "true")
    try:
        one = rate(n, 1, lambda i: cluster.run(*hold) and None)
        eight = rate(n // CLIENTS, CLIENTS, lambda i: cluster.run(*hold) and None)
    finally:
        cluster.run("scancel", "-n", name, check=False)
        while cluster.run("squeue", "-h", "-n", name).stdout.strip():
            time.sleep(0.05)
    return {
        "sbatch_hold_1_client_per_s": round(one, 1),
        "sbatch_hold_8_clients_per_s": round(eight, 1),
        "slurmrestd": slurmrestd(cluster, n),
        "version": cluster.run("sinfo", "-V").stdout.strip(),
    }


def slurmrestd(cluster: Cluster, n: int) -> dict[str, Any]:
    """Held submissions through ``slurmrestd`` on a unix socket, 1 and 8 clients.

    slurmrestd refuses to run as root, and its local authentication accepts only peers of its
    own uid: run as root, this bench starts it and its clients (``_slurmrest_client.py``, the
    standard library under the system's ``python3``) as ``nobody``.
    """
    exe = shutil.which("slurmrestd")
    if exe is None:
        return {
            "measured": False,
            "why": "slurmrestd is not installed (scripts/slurm.sh installs it)",
        }
    user = "nobody" if os.getuid() == 0 else str(os.getuid())
    as_user = ["runuser", "-u", "nobody", "--"] if os.getuid() == 0 else []
    client = Path(__file__).with_name("_slurmrest_client.py")
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o777)  # the unprivileged daemon makes its socket here
        sock = Path(tmp) / "rest.sock"
        argv = [exe, "-a", "rest_auth/local", "-s", "openapi/v0.0.38", f"unix:{sock}"]
        conf = f"SLURM_CONF={cluster.env['SLURM_CONF']}"
        with open(Path(tmp) / "slurmrestd.log", "wb") as log:
            daemon = subprocess.Popen([*as_user, "env", conf, *argv], stdout=log, stderr=log)
        try:
            deadline = time.monotonic() + 30
            while not sock.exists():
                if daemon.poll() is not None or time.monotonic() > deadline:
                    why = (Path(tmp) / "slurmrestd.log").read_text(errors="replace").strip()
                    return {"measured": False, "why": f"slurmrestd did not start: {why[-300:]}"}
                time.sleep(0.05)
            done = subprocess.run(
                [*as_user, "python3", str(client), str(sock), str(n), str(CLIENTS)],
                capture_output=True,
                text=True,
            )
        finally:
            daemon.terminate()
            daemon.wait()
            cluster.run("scancel", "-u", user, check=False)
            while cluster.run("squeue", "-h", "-u", user).stdout.strip():
                time.sleep(0.05)
    if done.returncode != 0:
        return {"measured": False, "why": (done.stderr or done.stdout).strip()[-300:]}
    return {"measured": True, "api": "v0.0.38, rest_auth/local", **json.loads(done.stdout)}


def side_by_side(
    doc: str,
    default_n: int,
    ours: Callable[[Path, int], dict[str, Any]],
    anchor: Callable[[Cluster, Path, int], dict[str, Any]],
    parents: tuple[argparse.ArgumentParser, ...] = (),
) -> None:
    """The shared command line of the benches with a Slurm anchor: ``--n``, ``--slurm`` (start
    the cluster if needed), ``--no-slurm`` and the options of ``parents``; StarForge first, then
    the anchor, one JSON document with the machine's load before and after."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0], parents=list(parents))
    parser.add_argument("--n", type=int, default=default_n)
    parser.add_argument("--slurm", action="store_true", help="start Slurm's cluster if needed")
    parser.add_argument("--no-slurm", action="store_true", help="StarForge alone")
    args = parser.parse_args()
    report: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "load_before": load()}}
    with tempfile.TemporaryDirectory() as tmp:
        report["starforge"] = ours(Path(tmp), args.n)
        if not args.no_slurm:
            cluster = Cluster(start=args.slurm)
            try:
                report["slurm"] = anchor(cluster, Path(tmp), args.n)
            finally:
                cluster.close()
    report["machine"]["load_after"] = load()
    json.dump(report, sys.stdout, indent=2)
    print()


def main() -> None:
    scale = argparse.ArgumentParser(add_help=False)
    scale.add_argument(
        "--servers", type=int, default=1, help="server processes (over 1: on PostgreSQL)"
    )
    scale.add_argument(
        "--database-url",
        default="",
        help="measure on this PostgreSQL cluster (a database is made on it and dropped); "
        "default with --servers over 1: the one scripts/postgres.sh runs",
    )
    args, _ = scale.parse_known_args()
    cluster = args.database_url
    if args.servers > 1 and not cluster:
        got = subprocess.run(
            ["bash", str(ROOT / "scripts" / "postgres.sh"), "url"], capture_output=True, text=True
        )
        if got.returncode != 0:
            raise SystemExit(
                "--servers needs PostgreSQL: scripts/postgres.sh start, or give --database-url"
            )
        cluster = got.stdout.strip()

    def ours(root: Path, n: int) -> dict[str, Any]:
        return starforge(root, n, args.servers, cluster)

    side_by_side(__doc__, 400, ours, lambda c, _, n: slurm(c, n), parents=(scale,))


if __name__ == "__main__":
    main()
