"""What the soak runs against: a PostgreSQL cluster of its own, two server processes sharing it
and one storage root, and a webhook receiver on 127.0.0.1.

The cluster is ``scripts/postgres.sh`` with ``STARFORGE_PG_DIR`` set to a folder of the soak's, so
stopping and starting it (a fault) never touches the suite's shared one. Each server is
``python -m starforge.server --home HOME`` as production starts it (docs/deploy.md): its own home,
the same ``database_url`` and ``storage_root``. A killed server is started again with the same
home; it takes its previous port when that is free, and the soak reads its URL from its server
file either way.
"""

from __future__ import annotations

import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from starforge.client import config
from starforge.client.http import Client
from starforge.contract.auth import Role
from starforge.server.db.engine import make_engine, make_sessions, migrate
from starforge.server.services.access import users

ROOT = Path(__file__).resolve().parents[1]
PG_SCRIPT = ROOT / "scripts" / "postgres.sh"
SLURM_SCRIPT = ROOT / "scripts" / "slurm.sh"
TOKENS = {"alice": "soak-alice-token-0123456789", "bob": "soak-bob-token-0123456789"}


def wait_until(check: Callable[[], bool], what: str, limit_s: float = 120.0) -> None:
    deadline = time.monotonic() + limit_s
    while True:
        try:
            if check():
                return
        except Exception:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.2)


class Postgres:
    """``scripts/postgres.sh`` on a cluster folder of the soak's own."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def script(self, command: str) -> str:
        env = {**os.environ, "STARFORGE_PG_DIR": str(self.folder)}
        done = subprocess.run(
            ["bash", str(PG_SCRIPT), command], env=env, capture_output=True, text=True, timeout=300
        )
        if done.returncode != 0:
            raise RuntimeError(f"postgres.sh {command}: {done.stderr.strip()[-500:]}")
        return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""

    def start(self) -> str:
        self.folder.parent.mkdir(parents=True, exist_ok=True)
        self.folder.parent.chmod(0o755)  # the `postgres` user the cluster runs as under root
        return self.script("start")

    def stop(self) -> None:
        self.script("stop")

    def destroy(self) -> None:
        self.script("destroy")


def prepare_database(url: str) -> None:
    """Migrate to head and add the two users: alice an admin, bob a member."""
    engine = make_engine(url)
    migrate(engine)
    with make_sessions(engine).begin() as session:
        for name, token in TOKENS.items():
            user = users.ensure_user(session, name, token)
            if name == "alice":
                user.role = Role.ADMIN.value
    engine.dispose()


@dataclass
class Server:
    name: str
    home: Path
    proc: subprocess.Popen[bytes] | None = None
    url: str = ""
    starts: int = 0
    # Processes on one database share the key that seals webhook and user secrets (docs/secrets.md)
    secrets_key: str = ""

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def client(self, user: str = "alice", timeout: float = 30.0) -> Client:
        return Client(self.url, token=TOKENS[user], timeout=timeout)

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("STARFORGE_")}
        env.update(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", STARFORGE_SECRETS_KEY=self.secrets_key)
        server_file = self.home / "server" / "server.json"
        server_file.unlink(missing_ok=True)  # so the wait below sees this start's URL
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "starforge.server", "--home", str(self.home)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=(self.home / f"server.{self.starts}.err").open("wb"),
            start_new_session=True,
        )
        self.starts += 1
        wait_until(lambda: config.read_server_file(self.home) is not None, f"server {self.name}")
        info = config.read_server_file(self.home)
        assert info is not None
        self.url = str(info["url"])

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.kill()

    def leads(self) -> bool:
        with self.client(timeout=5.0) as c:
            return bool(c.info().leader)


def write_settings(home: Path, settings: dict[str, Any]) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "server.yaml").write_text(yaml.safe_dump(settings))


def server_settings(url: str, storage: Path, *, slurm: bool) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "database_url": url,
        "storage_root": str(storage),
        "embedded": False,
        "containers": "none",
        "isolation": "none",
        "job_user": "",
        "heartbeat_s": 1.0,
        "lost_after_s": 15.0,
        "stop_grace_s": 10.0,
        "pause_grace_s": 30.0,
        "preemption": True,
        "preempt_min_interval_s": 20.0,
        "notify_allow_cidrs": ["127.0.0.1/32"],
        "notify_backoff_s": 0.5,
        "notify_backoff_max_s": 5.0,
        "notify_max_tries": 100,
        "notify_timeout_s": 5.0,
        "report_drain_s": 10.0,
    }
    if slurm:
        settings["executor"] = "slurm"
    else:
        settings["inventory"] = [{"name": f"h200-{i}", "series": "h200", "gpus": 8} for i in (1, 2)]
    return settings


@dataclass
class Receiver:
    """Webhook deliveries as they arrive: delivery id, run, status (every POST, retries too)."""

    deliveries: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: http.server.ThreadingHTTPServer | None = None

    def start(self) -> str:
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                payload = json.loads(body or b"{}")
                with receiver.lock:
                    receiver.deliveries.append(
                        {
                            "delivery": self.headers.get("X-StarForge-Delivery", ""),
                            "run_id": payload.get("run_id", ""),
                            "status": payload.get("status", ""),
                        }
                    )
                self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def seen(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.deliveries)

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
