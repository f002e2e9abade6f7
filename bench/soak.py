"""A chaos soak: a mixed workload on two servers sharing one PostgreSQL while faults land at random,
then one JSON document saying which invariants held.

Workload (two users, alice an admin with priority 10 and bob a member with priority 0, both with
a webhook to a receiver on 127.0.0.1): cheap custom/custom jobs (``bench/soak_lab.py``), some with
``--output-dataset``; bob's whole-cluster runs that alice's runs preempt; pause and resume of
running runs; and, unless ``--no-trl``, tiny trl/sft pipelines (``--then export``) and sweeps with
early stopping, at most one of those at a time (they train for real). Submissions go through
``sf`` as a user types them; reads, pause and resume through the HTTP API.

Faults (a Poisson process of ``--faults-per-minute``, seeded by ``--seed``): kill -9 of the
leader, of the follower, of a running run's runner; PostgreSQL stopped and started; a maintenance
drain and its resume; with ``--slurm``, slurmctld stopped and started. What a fault killed is
started again.

At the end (every paused run resumed, the cluster left to settle): the invariants of
``bench/soak_checks.py``. Exit status 0 when every one held, 1 otherwise.

Usage: .venv/bin/python bench/soak.py --minutes 22 --faults-per-minute 1.6 --seed 7 [--slurm]
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import fcntl
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import soak_checks as checks
import soak_lab
from soak_cluster import (
    SLURM_SCRIPT,
    TOKENS,
    Postgres,
    Receiver,
    Server,
    prepare_database,
    server_settings,
    wait_until,
    write_settings,
)

from starforge.client import datasets as dataset_client
from starforge.client import labops
from starforge.contract.datasets import parse_ref

IMAGE = "registry.example/soak:1"
FAULTS = {  # kind: weight
    "kill_leader": 3,
    "kill_follower": 2,
    "kill_runner": 3,
    "postgres_restart": 2,
    "drain": 1,
}
ACTIONS = {  # kind: weight
    "submit": 5,
    "output_dataset": 3,
    "pause": 2,
    "resume": 2,
    "preempt": 1,
    "pipeline": 1,
    "sweep": 1,
}
MAX_IN_FLIGHT = 4


class Soak:
    def __init__(self, args: argparse.Namespace, work: Path) -> None:
        self.args = args
        self.work = work
        self.rng = random.Random(args.seed)
        self.fault_rng = random.Random(args.seed * 7919 + 1)
        self.pg = Postgres(work / "pg" / "cluster")
        key = base64.b64encode(os.urandom(32)).decode()
        self.servers = [Server(n, work / n, secrets_key=key) for n in ("a", "b")]
        self.receiver = Receiver()
        self.client_home = work / "client"
        self.stop = threading.Event()
        self.faults: Counter[str] = Counter()
        self.timeline: list[dict[str, Any]] = []
        self.actions: Counter[str] = Counter()
        self.sf_errors: Counter[str] = Counter()
        self.preempt_waiting: str = ""
        self.started = time.monotonic()
        self.lock = threading.Lock()

    # ---- setup and teardown --------------------------------------------------------------------

    def setup(self) -> None:
        url = self.pg.start()
        prepare_database(url)
        storage = self.work / "storage"
        for server in self.servers:
            write_settings(server.home, server_settings(url, storage, slurm=self.args.slurm))
            server.start()
        self.hook = self.receiver.start()
        self.lab = soak_lab.make(self.work, self.client_home, trl=self.args.trl)
        for user, priority in (("alice", 10), ("bob", 0)):
            self.must("alice", "admin", "quota", "set", user, "--priority", str(priority),
                      "--max-gpus", "16", "--max-runs", "16")  # fmt: skip
            self.must(user, "notify", "add", self.hook)

    def teardown(self) -> None:
        self.stop.set()
        for server in self.servers:
            server.stop()
        self.receiver.close()
        with contextlib.suppress(Exception):
            self.pg.destroy()

    # ---- talking to the servers ----------------------------------------------------------------

    def live(self) -> Server:
        up = [s for s in self.servers if s.alive] or self.servers
        return self.rng.choice(up)

    def sf(self, user: str, *args: str) -> subprocess.CompletedProcess[str]:
        env = soak_lab.sf_env(self.client_home, self.live().url, TOKENS[user])
        return subprocess.run(
            [sys.executable, "-m", "starforge.cli.main", *args],
            cwd=self.lab if hasattr(self, "lab") else None,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )

    def must(self, user: str, *args: str, limit_s: float = 180.0) -> str:
        """``sf`` until it succeeds (a fault may be under way), its output."""
        deadline = time.monotonic() + limit_s
        while True:
            got = self.sf(user, *args)
            if got.returncode == 0:
                return got.stdout
            if time.monotonic() > deadline:
                raise RuntimeError(f"sf {' '.join(args)}: {got.stderr.strip()[-400:]}")
            time.sleep(1)

    def tried(self, user: str, kind: str, *args: str) -> dict[str, Any] | None:
        """``sf ... --json`` once: its document, or None (counted) when it failed."""
        got = self.sf(user, *args, "--json")
        if got.returncode != 0:
            self.sf_errors[f"{kind}: {(got.stderr.strip().splitlines() or ['?'])[0][:90]}"] += 1
            return None
        self.actions[kind] += 1
        body = json.loads(got.stdout)
        return body if isinstance(body, dict) else {}

    def runs(self) -> list[Any]:
        """Every run of both users (each sees their own), by id."""
        found: dict[str, Any] = {}
        server = self.live()
        for user in TOKENS:
            with server.client(user) as c:
                for view in c.list_runs(limit=1000).runs:
                    found[view.run_id] = view
        return list(found.values())

    # ---- the workload --------------------------------------------------------------------------

    def workload(self) -> None:
        while not self.stop.wait(self.rng.uniform(1.5, 3.5)):
            kind = self.rng.choices(list(ACTIONS), weights=list(ACTIONS.values()))[0]
            try:
                self.act(kind)
            except Exception as exc:
                self.sf_errors[f"{kind}: {type(exc).__name__}: {str(exc)[:80]}"] += 1

    def act(self, kind: str) -> None:
        views = self.runs()
        going = [v for v in views if v.status not in checks.TERMINAL | {"paused"}]
        trl_going = any(v.method.startswith("trl/") for v in going)
        if self.preempt_waiting:  # bob's whole-cluster run: once it runs, alice's preempts it
            low = next((v for v in views if v.run_id == self.preempt_waiting), None)
            if low is not None and low.status == "running":
                self.submit("alice", "job", "h200:8", kind="preempting")
            if low is None or low.status not in ("queued", "starting"):
                self.preempt_waiting = ""
        user = self.rng.choice(list(TOKENS))
        if kind in ("submit", "output_dataset") and len(going) < MAX_IN_FLIGHT:
            extra: list[str] = []
            if kind == "output_dataset":
                extra = ["--output-dataset", f"{user}/soak-{self.rng.getrandbits(40):x}@v1"]
            self.submit(user, self.rng.choice(["job", "job", "long"]), "h200:1", *extra, kind=kind)
        elif kind == "pause":
            running = [v for v in going if v.status == "running" and v.method == "custom/custom"]
            if running:
                view = self.rng.choice(running)
                with self.live().client(view.user) as c:
                    if c.pause(view.run_id).accepted:
                        self.actions["pause"] += 1
        elif kind == "resume":
            paused = [v for v in views if v.status == "paused"]
            if paused:
                view = self.rng.choice(paused)
                with self.live().client(view.user) as c:
                    if c.resume(view.run_id).accepted:
                        self.actions["resume"] += 1
        elif kind == "preempt" and len(going) < MAX_IN_FLIGHT and not self.preempt_waiting:
            made = self.submit("bob", "long", "h200:16", kind="preempted_candidate")
            self.preempt_waiting = made or ""
        elif kind == "pipeline" and self.args.trl and not trl_going:
            self.submit(user, "sft", "h200:1", *soak_lab.SFT, "-s", "max_steps=2",
                        "--then", "export", kind="pipeline")  # fmt: skip
        elif kind == "sweep" and self.args.trl and not trl_going:
            self.tried(
                user,
                "sweep",
                "sweep",
                "submit",
                "sft",
                "-p",
                "h200:1",
                *soak_lab.SFT,
                "-s",
                "max_steps=4",
                "-g",
                "learning_rate=0.0001,0.004",
                "--early-stop",
                "--stop-metric",
                "loss",
                "--rungs",
                "2",
                "--keep",
                "2",
            )

    def submit(self, user: str, exp: str, profile: str, *extra: str, kind: str) -> str | None:
        image = ["--image", IMAGE] if exp != "sft" else []
        got = self.tried(user, kind, "submit", exp, "-p", profile, *image, "--max-retries", "8",
                         *extra)  # fmt: skip
        return str(got["run_id"]) if got and "run_id" in got else None

    # ---- faults --------------------------------------------------------------------------------

    def fault_kinds(self) -> dict[str, int]:
        kinds = dict(FAULTS)
        if self.args.slurm:
            kinds["slurmctld_restart"] = 2
        if self.args.faults:
            unknown = set(self.args.faults) - set(kinds)
            if unknown:
                raise SystemExit(f"--faults: unknown {sorted(unknown)}; known: {sorted(kinds)}")
            kinds = {k: w for k, w in kinds.items() if k in self.args.faults}
        return kinds

    def chaos(self) -> None:
        """Faults at the times of a Poisson process fixed in advance: a fault that takes long
        (a database down for 12 s) delays the next one, never thins the process."""
        rate = self.args.faults_per_minute / 60
        kinds = self.fault_kinds()
        due = time.monotonic()
        while rate > 0:
            due += self.fault_rng.expovariate(rate)
            if self.stop.wait(max(0.0, due - time.monotonic())):
                return
            kind = self.fault_rng.choices(list(kinds), weights=list(kinds.values()))[0]
            try:
                detail = getattr(self, f"fault_{kind}")()
            except Exception as exc:
                detail = f"not injected: {type(exc).__name__}: {exc}"[:200]
            if not detail.startswith("not injected"):
                self.faults[kind] += 1
            self.timeline.append({"t": round(time.monotonic() - self.started, 1),
                                  "fault": kind, "detail": detail})  # fmt: skip
            self.restart_what_is_down()

    def restart_what_is_down(self) -> None:
        for server in self.servers:
            if not server.alive:
                server.start()

    def leader(self) -> Server | None:
        for server in self.servers:
            if server.alive:
                with contextlib.suppress(Exception):
                    if server.leads():
                        return server
        return None

    def fault_kill_leader(self) -> str:
        leader = self.leader()
        if leader is None:
            return "not injected: no process leads now"
        leader.kill()
        time.sleep(self.fault_rng.uniform(0.5, 4))
        return f"server {leader.name}"

    def fault_kill_follower(self) -> str:
        leader = self.leader()
        follower = next((s for s in self.servers if s.alive and s is not leader), None)
        if leader is None or follower is None:
            return "not injected: no follower now"
        follower.kill()
        time.sleep(self.fault_rng.uniform(0.5, 4))
        return f"server {follower.name}"

    def fault_kill_runner(self) -> str:
        running = [v for v in self.runs() if v.status == "running" and v.attempts]
        self.fault_rng.shuffle(running)
        for view in running:
            number = max(a.number for a in view.attempts)
            record = Path(view.run_dir) / "state" / f"attempt-{number}.node-0.runner.json"
            with contextlib.suppress(OSError, ValueError, ProcessLookupError):
                pid = int(json.loads(record.read_text())["pid"])
                os.kill(pid, signal.SIGKILL)
                return f"{view.run_id} attempt {number} runner {pid}"
        return "not injected: no running run"

    def fault_postgres_restart(self) -> str:
        down = self.fault_rng.uniform(3, 12)
        self.pg.stop()
        time.sleep(down)
        self.pg.start()
        return f"down {down:.1f} s"

    def fault_drain(self) -> str:
        held = self.fault_rng.uniform(5, 15)
        with self.live().client("alice") as c:
            labops.drain(c, "soak")
        time.sleep(held)
        self.end_drain()
        return f"drained {held:.1f} s"

    def end_drain(self) -> None:
        def ended() -> bool:
            with self.live().client("alice") as c:
                labops.end_maintenance(c)
            return True

        wait_until(ended, "the maintenance to end", 180)

    def fault_slurmctld_restart(self) -> str:
        state = Path(os.environ.get("STARFORGE_SLURM_DIR", "/var/tmp/starforge-slurm"))
        pid = int((state / "run" / "slurmctld.pid").read_text())
        os.kill(pid, signal.SIGTERM)
        down = self.fault_rng.uniform(3, 10)
        time.sleep(down)
        subprocess.run(["bash", str(SLURM_SCRIPT), "start"], check=True, capture_output=True)
        return f"down {down:.1f} s"

    # ---- the end -------------------------------------------------------------------------------

    def settle(self) -> list[Any]:
        """Bring everything back, resume what is paused, wait for every run to end."""
        self.restart_what_is_down()
        self.pg.start()
        self.end_drain()
        deadline = time.monotonic() + self.args.settle_s
        resumed: set[str] = set()
        while time.monotonic() < deadline:
            try:
                views = self.runs()
                for view in views:
                    if view.status == "paused" and view.run_id not in resumed:
                        with self.live().client(view.user) as c:
                            if c.resume(view.run_id).accepted:
                                resumed.add(view.run_id)
                if all(v.status in checks.TERMINAL for v in views):
                    break
            except Exception:
                pass
            time.sleep(2)
        self.resumed_at_end = len(resumed)
        views = self.runs()
        owed = {(v.run_id, str(v.status)) for v in views if v.status in checks.TERMINAL}

        def delivered() -> bool:
            return owed <= {(d["run_id"], d["status"]) for d in self.receiver.seen()}

        with contextlib.suppress(TimeoutError):
            wait_until(delivered, "every webhook", 120)
        with contextlib.suppress(TimeoutError):
            wait_until(lambda: self.published(views), "the output datasets", 120)
        return [self.full(v.run_id) for v in views]

    def published(self, views: list[Any]) -> bool:
        for v in views:
            if v.status == "succeeded" and v.spec and v.spec.output_dataset:
                name = v.spec.output_dataset.split("@")[0]
                with self.live().client(v.user) as c:  # a user's datasets are their own
                    if not dataset_client.list_versions(c, name).versions:
                        return False
        return True

    def full(self, run_id: str) -> dict[str, Any]:
        server = self.live()
        for user in TOKENS:
            with server.client(user) as c, contextlib.suppress(Exception):
                return c.get_run(run_id).model_dump(mode="json")
        raise RuntimeError(f"no user sees {run_id}")

    def report(self, runs: list[dict[str, Any]]) -> dict[str, Any]:
        logs: dict[tuple[str, int], str] = {}
        stamps: dict[str, list[dict[str, Any]]] = {}
        outputs: dict[str, str] = {}
        versions: dict[str, list[dict[str, Any]]] = {}
        custom = [r for r in runs if r["method"] == "custom/custom"]
        for run in custom:
            for attempt in run["attempts"]:
                path = Path(attempt["log_path"])
                path = path if path.is_absolute() else Path(run["run_dir"]) / path
                if path.is_file():
                    logs[(run["run_id"], attempt["number"])] = path.read_text(errors="replace")
            alive = Path(run["run_dir"]) / "out" / "soak-alive.jsonl"
            if alive.is_file():
                rows = [json.loads(x) for x in alive.read_text().splitlines() if x.strip()]
                stamps[run["run_id"]] = rows
            ref = (run.get("spec") or {}).get("output_dataset") or ""
            if ref:
                outputs[run["run_id"]] = ref
        for run_id, ref in outputs.items():
            owner = next(r["user"] for r in runs if r["run_id"] == run_id)
            name = ref.split("@")[0]
            with self.live().client(owner) as c:  # a user's datasets are their own
                listed = dataset_client.list_versions(c, name).versions
                refs = [parse_ref(f"{name}@{v.version}", owner=owner) for v in listed]
                versions[name] = [dataset_client.show(c, r).model_dump(mode="json") for r in refs]
        with self.live().client("alice") as c:
            usage = labops.usage_report(c, by="user").total_gpu_hours
        pipelines = {r["run_id"] for r in runs if r.get("steps")}
        invariants = {
            "every_run_terminal_or_resumable": checks.settled(runs),
            "each_pipeline_step_once": checks.steps_once(runs, pipelines),
            "each_output_dataset_once": checks.datasets_once(runs, outputs, versions),
            "each_webhook_event_once": checks.webhooks_once(runs, self.receiver.seen()),
            "no_log_line_lost_or_doubled": checks.logs_exact(custom, logs),
            "gpu_hours_equal_attempts_x_gpus": checks.gpu_hours(runs, usage),
            "no_two_attempts_alive_at_once": checks.one_attempt_alive(runs, stamps),
        }
        return {
            "seed": self.args.seed,
            "minutes": self.args.minutes,
            "faults_per_minute": self.args.faults_per_minute,
            "executor": "slurm" if self.args.slurm else "local",
            "database": "postgresql, two server processes",
            "wall_s": round(time.monotonic() - self.started, 1),
            "faults": {"total": sum(self.faults.values()), "by_kind": dict(self.faults)},
            "workload": {
                "runs": len(runs),
                "actions": dict(self.actions),
                "resumed_at_end": self.resumed_at_end,
                "sf_errors_during_faults": dict(self.sf_errors),
            },
            "held": all(i["held"] for i in invariants.values()),
            "invariants": invariants,
            "timeline": self.timeline,
        }

    def run(self) -> dict[str, Any]:
        self.fault_kinds()  # an unknown --faults kind stops here, before anything starts
        self.setup()
        threads = [
            threading.Thread(target=self.workload, daemon=True),
            threading.Thread(target=self.chaos, daemon=True),
        ]
        for thread in threads:
            thread.start()
        self.stop.wait(self.args.minutes * 60)
        self.stop.set()
        for thread in threads:
            thread.join()
        return self.report(self.settle())


@contextlib.contextmanager
def slurm_lock(wanted: bool) -> Iterator[None]:
    """With ``--slurm``, the Slurm tests' lock (tests/conftest.py): no test meets a restarted
    slurmctld the soak caused."""
    if not wanted:
        yield
        return
    with open(Path(tempfile.gettempdir()) / "starforge-tests-slurm.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5.0, help="how long faults land")
    parser.add_argument("--faults-per-minute", type=float, default=1.5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--slurm", action="store_true", help="executor: slurm (scripts/slurm.sh)")
    parser.add_argument("--no-trl", dest="trl", action="store_false",
                        help="no pipelines or sweeps (they train tiny models)")  # fmt: skip
    parser.add_argument("--settle-s", type=float, default=600.0,
                        help="how long runs may take to end after the last fault")  # fmt: skip
    parser.add_argument("--faults", type=lambda v: v.split(","), default=[],
                        help="only these kinds, e.g. kill_runner,drain (default: all)")  # fmt: skip
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="sf-soak-", dir="/var/tmp"))
    work.chmod(0o755)
    soak = Soak(args, work)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # teardown still runs
    try:
        with slurm_lock(args.slurm):
            document = soak.run()
    finally:
        soak.teardown()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(document, indent=2, default=str))
    return 0 if document["held"] else 1


if __name__ == "__main__":
    sys.exit(main())
