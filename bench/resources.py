"""Benchmarks of resources (queue, scheduler, admission); prints one JSON document.

StarForge, through its real API on a real embedded server (virtual inventory: two nodes of
8 x h200 and one of 2 x h100; real runners):

* ``admissions_per_s``: POST /jobs into the queue while a blocker holds every GPU (so every run
  waits and the scheduler re-plans the growing queue after each admission), one client and four;
* ``scheduler_pass_10k``: one pass over 10,000 queued runs, the pure ``scheduler.plan`` (a full
  cluster, mixed shapes, 50 users), and the whole pass with SQLite (read, plan, store reasons):
  the first, passes that find nothing new, and passes after an arrival (which plan again), each
  also in CPU ms, the steadier figure on a shared machine (``--only scheduler``: just these);
* ``submit_to_running_idle``: idle cluster, random 0.2-1.2 s gaps (a fixed gap phase-locks to
  loop ticks); client clock from before POST to ``running`` seen, server clock queued->starting
  (the scheduler's own latency) and queued->running (includes the runner's start-up);
* ``trivial_runs_per_s``: N runs whose entrypoint is ``true``, first POST to last one ended.

Slurm 22.05 on this machine, the same figures, when ``sbatch`` is installed (``--with-slurm``
installs it with apt-get first): held ``sbatch -H`` submissions/s, ``sbatch``->start on an idle
cluster, trivial jobs/s end to end, with the tuned configuration of
``shared/reference/slurm-on-one-machine.md`` (two h200 nodes, one h100 node, fake GPU devices).
Without Slurm the reference figures of the issue are printed, marked ``"source": "reference"``.

Usage: .venv/bin/python bench/resources.py [--quick] [--with-slurm] [--no-slurm]
       [--only scheduler [--database-url URL]]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import hashlib
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import yaml

from starforge.catalog.loader import get_method
from starforge.contract.api import API_PREFIX
from starforge.contract.jobspec import JobSpec
from starforge.contract.profiles import Pool
from starforge.server.services.scheduling import scheduler
from starforge.server.settings import NodeDef

INVENTORY = [
    {"name": "h200-1", "series": "h200", "gpus": 8},
    {"name": "h200-2", "series": "h200", "gpus": 8},
    {"name": "h100-1", "series": "h100", "gpus": 2},
]
REFERENCE_SLURM = {
    "source": "reference (shared/reference/slurm-on-one-machine.md, measured on this kind of "
    "machine; Slurm is not installed here: rerun with --with-slurm)",
    "held_sbatch_per_s": {"1_client": 198, "4_clients": 247, "slurmrestd_1_client": 371},
    "sbatch_to_start_idle_s": {"tuned_median": 0.263, "default_median": 2.165},
    "trivial_jobs_per_s_end_to_end": {"tuned_1_client": [42.2, 46.7], "tuned_4_clients": 48.7},
}


def summary(samples: list[float], digits: int = 4) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median": round(statistics.median(ordered), digits),
        "min": round(ordered[0], digits),
        "p90": round(ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))], digits),
        "max": round(ordered[-1], digits),
        "n": len(ordered),
    }


# ---- a real server --------------------------------------------------------------------------


class Server:
    """``python -m starforge.server`` in a fresh home, and an HTTP client with its token."""

    def __init__(self, home: Path, config: dict[str, Any], local_token: str = "") -> None:
        """``local_token``: the local admin's token to start with (the servers of one database
        share it; each would otherwise register its own, replacing the last one's)."""
        home.mkdir(parents=True)
        if local_token:
            (home / "server").mkdir()
            fd = os.open(home / "server" / "local-token", os.O_WRONLY | os.O_CREAT, 0o600)
            with os.fdopen(fd, "w") as out:
                out.write(local_token + "\n")
        (home / "server.yaml").write_text(yaml.safe_dump(config))
        env = {k: v for k, v in os.environ.items() if not k.startswith("STARFORGE_")}
        info = home / "server" / "server.json"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "starforge.server", "--home", str(home)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while not info.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start; see {home}/server/server.log")
            time.sleep(0.05)
        self.url = json.loads(info.read_text())["url"]
        self.token = (home / "server" / "local-token").read_text().strip()
        self.gates = home / "gates"
        self.gates.mkdir()

    def client(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.url + API_PREFIX,
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=120,
        )

    def stop(self, runs: list[str] = ()) -> None:  # type: ignore[assignment]
        """Stop the server, then end the runners of ``runs`` it left (separate process groups)."""
        refs: list[str] = []
        with self.client() as c:
            for run_id in runs:
                for a in c.get(f"/runs/{run_id}").json().get("attempts", []):
                    refs += (a.get("executor_ref") or "").split(",")
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)
        for ref in filter(None, refs):
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.killpg(int(ref.removeprefix("local:")), signal.SIGKILL)


def package(c: httpx.Client, script: str) -> dict[str, Any]:
    """Upload a custom/custom experiment whose train.sh is ``script``; a submit body for it."""
    data = script.encode()
    digest = hashlib.sha256(data).hexdigest()
    if c.post("/blobs/missing", json={"digests": [digest]}).json()["missing"]:
        c.put(f"/blobs/{digest}", content=data).raise_for_status()
    spec: dict[str, Any] = {
        "project": "bench",
        "experiment": "exp",
        "method": get_method("custom/custom").ref().model_dump(),
        "profiles": ["h200:1"],
        "image": "registry.example/bench:1",
        "provenance": {"git_commit": "b" * 40, "client_version": "0.1.0"},
    }
    if "observability_url" in JobSpec.model_fields:  # external curves: custom/custom needs one
        spec["observability_url"] = "https://wandb.example/bench"
    files = [{"path": "experiments/exp/train.sh", "sha256": digest, "size": len(data)}]
    return {"spec": spec, "manifest": {"files": files}}


def post(c: httpx.Client, body: dict[str, Any], profile: str) -> str:
    body = {**body, "spec": {**body["spec"], "profiles": [profile]}}
    resp = c.post("/jobs", json={**body, "idempotency_key": uuid.uuid4().hex})
    resp.raise_for_status()
    return str(resp.json()["run_id"])


def wait_status(c: httpx.Client, run_id: str, statuses: set[str], poll: float = 0.005) -> dict:
    deadline = time.monotonic() + 300
    while True:
        view = c.get(f"/runs/{run_id}").json()
        if view["status"] in statuses or time.monotonic() > deadline:
            return dict(view)
        time.sleep(poll)


def event_at(view: dict[str, Any], status: str) -> datetime:
    return datetime.fromisoformat(next(e["at"] for e in view["events"] if e["dst"] == status))


GATED = 'while [[ ! -e "{gates}/$FORGE_RUN_ID" ]]; do sleep 0.05; done\n'


def admissions(root: Path, n: int) -> dict[str, Any]:
    srv = Server(root / "admit", {"inventory": INVENTORY})
    blockers: list[str] = []
    try:
        with srv.client() as c:
            gated = package(c, GATED.format(gates=srv.gates))
            blockers = [post(c, gated, "h200:16"), post(c, gated, "h100:2")]
            for run_id in blockers:
                wait_status(c, run_id, {"running"}, poll=0.05)
            trivial = package(c, "true\n")
            began = time.perf_counter()
            for _ in range(n):
                post(c, trivial, "h200:1")
            one = n / (time.perf_counter() - began)

        def client_loop(count: int) -> None:
            with srv.client() as own:
                for _ in range(count):
                    post(own, trivial, "h200:1")

        threads = [threading.Thread(target=client_loop, args=(n // 4,)) for _ in range(4)]
        began = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        four = 4 * (n // 4) / (time.perf_counter() - began)
        with srv.client() as c:
            queued = len(c.get("/runs", params={"status": "queued", "limit": 1000}).json()["runs"])
    finally:
        srv.stop(blockers)
    return {
        "1_client_per_s": round(one, 1),
        "4_clients_per_s": round(four, 1),
        "queued_at_the_end": queued,
        "aim_per_s": 400,
    }


def submit_to_running(root: Path, n: int) -> dict[str, Any]:
    srv = Server(root / "idle", {"inventory": INVENTORY})
    client_s, starting_s, running_s = [], [], []
    unreported = 0
    try:
        with srv.client() as c:
            body = package(c, "true\n")
            for _ in range(n):
                time.sleep(random.uniform(0.2, 1.2))
                began = time.perf_counter()
                run_id = post(c, body, "h200:1")
                view = wait_status(c, run_id, {"running", "succeeded", "failed"})
                client_s.append(time.perf_counter() - began)
                view = wait_status(c, run_id, {"succeeded", "failed"}, poll=0.05)
                if view["status"] != "succeeded":
                    raise RuntimeError(f"{run_id} {view['status']}: {view['reason']}")
                queued = event_at(view, "queued")
                starting_s.append((event_at(view, "starting") - queued).total_seconds())
                if any(e["dst"] == "running" for e in view["events"]):
                    running_s.append((event_at(view, "running") - queued).total_seconds())
                else:  # finalised from its exit record before its ``running`` report arrived
                    unreported += 1
    finally:
        srv.stop()
    return {
        "client_post_to_running_seen_s": summary(client_s),
        "server_queued_to_starting_s": summary(starting_s),
        "server_queued_to_running_s": summary(running_s) if running_s else {},
        "runs_without_a_running_event": unreported,
    }


def trivial_throughput(root: Path, n: int) -> dict[str, Any]:
    srv = Server(root / "trivial", {"inventory": INVENTORY})
    try:
        with srv.client() as c:
            body = package(c, "true\n")
            began = time.perf_counter()
            run_ids = [post(c, body, "h200:1") for _ in range(n)]
            ends = [wait_status(c, r, {"succeeded", "failed"}, poll=0.05) for r in run_ids]
            elapsed = time.perf_counter() - began
    finally:
        srv.stop()
    return {
        "runs": n,
        "succeeded": sum(v["status"] == "succeeded" for v in ends),
        "seconds": round(elapsed, 2),
        "runs_per_s": round(n / elapsed, 2),
    }


# ---- the scheduler pass ---------------------------------------------------------------------


def _queue(
    n: int, inventory: list[NodeDef], smallest: int = 1
) -> tuple[list[scheduler.QueuedRun], list]:
    rng = random.Random(4)
    series = sorted({node.series for node in inventory})

    def pool(gpus: int, nodes: int, s: str) -> Pool:
        return Pool(name="all", profile=s, series=s, nodes=nodes, gpus_per_node=gpus)

    shapes = [(pool(g, 1, s),) for s in series for g in (1, 2, 4, 8) if g >= smallest]
    shapes += [(pool(8, 2, "h200"),)]
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    queue = [
        scheduler.QueuedRun(
            f"r-{i:06d}",
            f"user{rng.randrange(50)}",
            rng.choice((0, 0, 0, 1)),
            t0 + timedelta(seconds=i),
            rng.choice(shapes),
        )
        for i in range(n)
    ]
    holdings = [  # a busy cluster: every node holds a run using all but one of its GPUs
        scheduler.Holding(f"r-held{i}", "user0", node.name, tuple(range(node.gpus - 1)))
        for i, node in enumerate(inventory)
    ]
    return queue, holdings


def pure_pass(n: int, repeats: int) -> dict[str, Any]:
    virtual = [NodeDef.model_validate(node) for node in INVENTORY]
    big = [NodeDef(name=f"h200-{i}", series="h200", gpus=8) for i in range(48)] + [
        NodeDef(name=f"h100-{i}", series="h100", gpus=8) for i in range(16)
    ]
    found: dict[str, Any] = {}
    for label, inventory in (("virtual_3_nodes", virtual), ("64_nodes", big)):
        queue, holdings = _queue(n, inventory)
        samples = []
        for _ in range(repeats):
            began = time.perf_counter()
            decisions = scheduler.plan(queue, inventory, holdings)
            samples.append((time.perf_counter() - began) * 1000)
        found[label] = {
            "ms": summary(samples, 2),
            "started": sum(d.starts for d in decisions),
            "queued": n,
        }
    return {**found, "aim_ms": 50}


def db_pass(
    root: Path, n: int, repeats: int = 5, database_url: str | None = None
) -> dict[str, Any]:
    """The dispatcher's pass with SQLite (or the empty database at ``database_url``): read the
    queue, plan, store every changed reason (the first pass stores 10,000; the next ones none).
    One GPU per node stays free, so the pass cannot skip, and every queued run needs at least
    two, so none starts.

    Three kinds of pass, each timed on the wall clock and in CPU (this thread's): the first,
    which stores every reason; passes that find the queue as the latest pass left it (the plan
    is kept); passes after one more run was queued (the whole queue is planned again)."""
    from starforge.server.db.models import Attempt, Run
    from starforge.server.runtime import build_runtime
    from starforge.server.services.scheduling import dispatch
    from starforge.server.settings import load_settings

    database = {"database_url": database_url} if database_url else {}
    settings = load_settings(root / "db-pass", inventory=INVENTORY, **database)
    rt = build_runtime(settings, executor=_NoExecutor())
    gc.freeze()  # as the server does once started: full collections leave start-up's objects
    virtual = [NodeDef.model_validate(node) for node in INVENTORY]
    queue, _ = _queue(n, virtual, smallest=2)  # every node keeps 1 GPU free: none starts
    now = datetime.now(UTC)

    def row(run_id: str, status: str, pools: list[Pool], user: str, priority: int = 0) -> Run:
        return Run(
            id=run_id,
            user=user,
            project="p",
            experiment="e",
            method="m",
            status=status,
            reason="",
            priority=priority,
            spec={},
            manifest={},
            pools=[p.model_dump(mode="json") for p in pools],
            gpus=sum(p.total_gpus for p in pools),
            idempotency_key=run_id,
            current_attempt=1 if status == "running" else 0,
            created_at=now,
            updated_at=now,
        )

    with rt.transaction() as session:
        for i, node in enumerate(virtual):  # one run holds all but one GPU of each node
            session.add(row(f"r-held{i}", "running", [], "user0"))
            slot = {"rank": 0, "pool": "all", "pool_rank": 0, "node": node.name}
            slot["gpus"] = list(range(node.gpus - 1))
            session.add(
                Attempt(
                    run_id=f"r-held{i}",
                    number=1,
                    started_at=now,
                    log_path="",
                    allocation=[slot],
                )
            )
        session.bulk_save_objects(
            [row(q.id, "queued", list(q.pools), q.user, q.priority) for q in queue]
        )

    def timed_pass() -> tuple[float, float]:
        began, cpu = time.perf_counter(), time.thread_time()
        assert dispatch.schedule_pass(rt) == []
        return (time.perf_counter() - began) * 1000, (time.thread_time() - cpu) * 1000

    first = timed_pass()
    unchanged = [timed_pass() for _ in range(repeats)]
    arrivals = []
    for i in range(repeats):
        with rt.transaction() as session:
            session.add(row(f"r-new{i}", "queued", list(queue[i].pools), "user-new"))
        arrivals.append(timed_pass())
    rt.engine.dispose()
    gc.unfreeze()
    return {
        "first_pass_ms_storing_every_reason": round(first[0], 1),
        "next_passes_ms": [round(wall, 1) for wall, _ in unchanged],
        "passes_after_an_arrival_ms": [round(wall, 1) for wall, _ in arrivals],
        "cpu_ms": {
            "first_pass": round(first[1], 1),
            "next_passes": summary([cpu for _, cpu in unchanged], 1),
            "passes_after_an_arrival": summary([cpu for _, cpu in arrivals], 1),
        },
        "queued": n,
        "aim_ms": 100,
    }


class _NoExecutor:
    name = "none"

    def start(self, binding_path: Path, log_path: Path) -> str:
        raise AssertionError("no queued run fits: nothing starts")

    def is_alive(self, ref: str) -> bool:
        return True

    def stop(self, ref: str, grace_s: float) -> None:
        pass


# ---- Slurm 22.05 on the same machine --------------------------------------------------------

SLURM_CONF = """ClusterName=bench
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd-%n.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd-%n.log
SlurmctldPort=16817
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
ReturnToService=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,bf_interval=1
AuthInfo=cred_expire=10
SlurmdParameters=config_overrides
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName=h200-[1-2] NodeHostname=localhost Port=[17001-17002] CPUs=32 RealMemory=1000000 Gres=gpu:h200:8 State=UNKNOWN
NodeName=h100-1 NodeHostname=localhost Port=17003 CPUs=32 RealMemory=1000000 Gres=gpu:h100:2 State=UNKNOWN
PartitionName=h200 Nodes=h200-[1-2] Default=YES MaxTime=INFINITE State=UP
PartitionName=h100 Nodes=h100-1 MaxTime=INFINITE State=UP
"""  # noqa: E501
GRES_CONF = """AutoDetect=off
NodeName=h200-[1-2] Name=gpu Type=h200 File=/run/fakegpu/nvidia[0-7]
NodeName=h100-1 Name=gpu Type=h100 File=/run/fakegpu/nvidia[0-1]
"""
SLURM_NODES = ("h200-1", "h200-2", "h100-1")


def install_slurm() -> None:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update"], check=True, capture_output=True, env=env)
    packages = ["slurmctld", "slurmd", "slurm-client", "munge"]
    subprocess.run(
        ["apt-get", "install", "-y", "--no-install-recommends", *packages],
        check=True,
        capture_output=True,
        env=env,
    )


class Slurm:
    """slurmctld + one slurmd per node on this machine (multiple-slurmd), munge auth."""

    def __init__(self, root: Path) -> None:
        self.dir = root / "slurm"
        for sub in ("state", *(f"spool/{n}" for n in SLURM_NODES)):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        (self.dir / "slurm.conf").write_text(SLURM_CONF.format(d=self.dir))
        (self.dir / "gres.conf").write_text(GRES_CONF)
        self.env = {**os.environ, "SLURM_CONF": str(self.dir / "slurm.conf")}
        Path("/run/fakegpu").mkdir(parents=True, exist_ok=True)
        for i in range(8):  # GPU "devices" slurmd can see; nothing ever opens them
            if not Path(f"/run/fakegpu/nvidia{i}").exists():
                subprocess.run(["mknod", f"/run/fakegpu/nvidia{i}", "c", "195", str(i)], check=True)
        self.procs: list[subprocess.Popen[bytes]] = []
        self.started_munge = False

    def up(self) -> None:
        if subprocess.run(["pgrep", "-x", "munged"], capture_output=True).returncode != 0:
            Path("/run/munge").mkdir(parents=True, exist_ok=True)
            shutil.chown("/run/munge", "munge", "munge")
            subprocess.run(["runuser", "-u", "munge", "--", "munged"], check=True)
            self.started_munge = True
        self._spawn(["slurmctld", "-D", "-i"])
        for node in SLURM_NODES:
            self._spawn(["slurmd", "-D", "-N", node])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            out = self.run("sinfo", "-h", "-N", "-o", "%N %t", check=False).stdout
            if out.count("idle") == len(SLURM_NODES):
                return
            time.sleep(0.2)
        raise RuntimeError(f"Slurm nodes did not come up: {out!r}; see {self.dir}")

    def _spawn(self, argv: list[str]) -> None:
        log = open(self.dir / f"{argv[0]}-{len(self.procs)}.out", "wb")  # noqa: SIM115
        self.procs.append(subprocess.Popen(argv, env=self.env, stdout=log, stderr=log))

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, env=self.env, capture_output=True, text=True, check=check)

    def down(self) -> None:
        for proc in reversed(self.procs):
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        pid_file = Path("/run/munge/munged.pid")
        if self.started_munge and pid_file.exists():  # leave a munged we did not start
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid_file.read_text().strip()), signal.SIGTERM)

    def wait_empty(self) -> None:
        while self.run("squeue", "-h").stdout.strip():
            time.sleep(0.05)


def slurm_figures(root: Path, n: int, latency_n: int) -> dict[str, Any]:
    slurm = Slurm(root)
    slurm.up()
    try:
        version = slurm.run("sinfo", "-V").stdout.strip()
        began = time.perf_counter()
        for _ in range(n):
            slurm.run("sbatch", "-H", "-Q", "-o", "/dev/null", "--wrap", "true")
        held = n / (time.perf_counter() - began)
        slurm.run("scancel", "-u", "root")
        slurm.wait_empty()
        samples = []
        for i in range(latency_n):
            time.sleep(random.uniform(0.2, 1.2))
            stamp = root / f"slurm-start-{i}"
            began_wall = time.time()
            slurm.run("sbatch", "-Q", "-o", "/dev/null", "--wrap", f"date +%s.%N > {stamp}")
            while not stamp.exists() or not stamp.read_text().strip():
                time.sleep(0.005)
            samples.append(float(stamp.read_text()) - began_wall)
        began = time.perf_counter()
        for _ in range(n):
            slurm.run("sbatch", "-Q", "-o", "/dev/null", "--wrap", "true")
        slurm.wait_empty()
        trivial = n / (time.perf_counter() - began)
    finally:
        slurm.down()
    return {
        "source": "measured here",
        "version": version,
        "held_sbatch_per_s_1_client": round(held, 1),
        "sbatch_to_start_idle_s": summary(samples),
        "trivial_jobs_per_s_end_to_end": round(trivial, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples (a smoke run)")
    parser.add_argument("--with-slurm", action="store_true", help="apt-get install Slurm if absent")
    parser.add_argument("--no-slurm", action="store_true", help="skip Slurm even if installed")
    parser.add_argument("--only", choices=["scheduler"], help="only these figures")
    parser.add_argument(
        "--database-url", help="an empty database for the scheduler pass (else SQLite)"
    )
    args = parser.parse_args()
    admit_n, latency_n, trivial_n, repeats = (40, 4, 10, 3) if args.quick else (400, 15, 60, 7)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        report: dict[str, Any] = {
            "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
            "scheduler_pass_10k": {"pure_plan": pure_pass(10_000, repeats)},
        }
        key = "with_database_url" if args.database_url else "with_sqlite"
        report["scheduler_pass_10k"][key] = db_pass(root, 10_000, repeats, args.database_url)
        if args.only == "scheduler":
            print(json.dumps(report, indent=2))
            return
        report["admissions_per_s"] = admissions(root, admit_n)
        report["submit_to_running_idle"] = submit_to_running(root, latency_n)
        report["trivial_runs_per_s"] = trivial_throughput(root, trivial_n)
        if not args.no_slurm and shutil.which("sbatch") is None and args.with_slurm:
            install_slurm()
        if not args.no_slurm and shutil.which("sbatch") is not None:
            report["slurm"] = slurm_figures(root, 300 if not args.quick else 30, latency_n)
        else:
            report["slurm"] = REFERENCE_SLURM
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
