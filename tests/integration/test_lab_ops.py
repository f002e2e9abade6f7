"""Running a lab end to end: a real server, real runners, real git, custom training scripts.

* Maintenance drain with three training runs (two resumable, one not): the two are paused with
  checkpoints, the third is reported as a blocker; new submissions queue; resume brings both
  back and they finish with continuous step counts.
* Webhooks: a receiver on 127.0.0.1 gets a signed payload for each terminal status (succeeded,
  failed, stopped), also after it was down for a while (the server retries).
* Accounting: ``sf admin usage`` equals the attempts' own start/end × GPUs.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from starforge.cli.connect import connect
from starforge.contract.labops import SIGNATURE_HEADER, TIMESTAMP_HEADER
from starforge.project import experiments
from starforge.project.lab import Lab
from tests.conftest import Result, commit_all
from tests.integration.conftest import embedded_server, wait_for

pytestmark = pytest.mark.integration
IMAGE = "registry.example/train:v1"
FINAL = {"succeeded", "failed", "stopped"}


@pytest.fixture(scope="module")
def server_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """This module's server retries webhooks fast, so a receiver that was down hears soon."""
    settings = {
        "stop_grace_s": 30,
        "pause_grace_s": 60,
        "notify_backoff_s": 0.2,
        "notify_backoff_max_s": 1.0,
        "notify_max_tries": 1000,
    }
    with embedded_server(tmp_path_factory.mktemp("sf-home"), settings) as home:
        yield home


# ---- helpers ----------------------------------------------------------------------------------


def sf_json(sf: Callable[..., Result], *args: str, cwd: Path | None = None) -> Any:
    got = sf(*args, "--json", cwd=cwd) if cwd else sf(*args, "--json")
    assert got.code == 0, got.err + got.out
    return got.json()


def submit(sf: Callable[..., Result], lab: Lab, experiment: str) -> str:
    body = sf_json(sf, "submit", experiment, "--profile", "h200:1", "--image", IMAGE, cwd=lab.root)
    return str(body["run_id"])


def view_of(sf: Callable[..., Result], run_id: str) -> dict[str, Any]:
    view = sf_json(sf, "job", "status", run_id)
    assert isinstance(view, dict)
    return view


def log_of(view: dict[str, Any], attempt: int) -> str:
    path = Path(view["run_dir"]) / "logs" / f"attempt-{attempt}.log"
    return path.read_text() if path.exists() else ""


def wait_until(check: Callable[[], bool], what: str, limit_s: float = 180.0) -> None:
    deadline = time.monotonic() + limit_s
    while not check():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.2)


def steps(log: str) -> list[int]:
    return [int(m) for m in re.findall(r"(?m)^step (\d+)/\d+ ", log)]


def add_experiment(lab: Lab, name: str, script: Callable[[str], str]) -> None:
    """Another custom experiment in ``lab`` whose train.sh is ``script(template)``."""
    experiments.new_experiment(lab, name, "custom/custom")
    folder = lab.root / "experiments" / name
    (folder / "train.sh").write_text(script((folder / "train.sh").read_text()))
    (folder / "config.yaml").write_text("starforge:\n  observability: platform\n")
    commit_all(lab.root, f"add {name}")


def never_checkpoints(text: str) -> str:
    """A long run that writes no checkpoint while it trains (it cannot resume from one)."""
    text = re.sub(r'STEPS="\$\{STEPS:-\d+\}"', 'STEPS="${STEPS:-3000}"', text)
    return re.sub(r'SAVE_EVERY="\$\{SAVE_EVERY:-\d+\}"', 'SAVE_EVERY="${SAVE_EVERY:-100000}"', text)


def three_steps(text: str) -> str:
    """A short run: what matters is when it starts, not how long it trains."""
    return re.sub(r'STEPS="\$\{STEPS:-\d+\}"', 'STEPS="${STEPS:-3}"', text)


# ---- maintenance drain ------------------------------------------------------------------------


def test_drain_pauses_the_resumable_runs_reports_the_blocker_and_resume_finishes_them(
    sf: Callable[..., Result], custom_lab: Callable[..., Lab]
) -> None:
    # 30 s: still training when the drain comes; the resumed attempts need no such margin.
    lab = custom_lab(steps=300, step_seconds=0.1, resumed_step_seconds=0.01)
    add_experiment(lab, "nock", never_checkpoints)
    add_experiment(lab, "quick", three_steps)
    resumable = [submit(sf, lab, "c1"), submit(sf, lab, "c1")]
    blocker = submit(sf, lab, "nock")
    for run_id in resumable:
        wait_until(lambda r=run_id: "[checkpoint]" in log_of(view_of(sf, r), 1), "a checkpoint")
    wait_until(lambda: len(steps(log_of(view_of(sf, blocker), 1))) >= 2, "the blocker's steps")

    drained = sf_json(sf, "admin", "maintenance", "drain", "--note", "driver upgrade")
    assert drained["active"] and sorted(drained["paused"]) == sorted(resumable)
    # A drained run already paused whose runner has not exited yet is held too (the executor
    # still runs it); the run with no checkpoint is the one blocker of its own.
    why = {b["run_id"]: b["why"] for b in drained["blockers"]}
    assert set(why) - set(resumable) == {blocker}
    assert "no checkpoint yet" in why[blocker]
    assert not drained["safe_to_restart"]
    for run_id in resumable:
        view = wait_for(sf, run_id, {"paused", *FINAL})
        assert (view["status"], view["end_reason"]) == ("paused", "paused_by_user")
    assert view_of(sf, blocker)["status"] == "running"  # a blocker is never paused
    shown = sf("admin", "maintenance", "status")
    assert shown.code == 0 and "driver upgrade" in shown.out and blocker in shown.out
    assert "not safe" in shown.out and "no checkpoint yet" in shown.out

    newcomer = submit(sf, lab, "quick")  # submissions still queue while dispatch is stopped
    wait_until(
        lambda: view_of(sf, newcomer)["reason"].startswith("maintenance (driver upgrade)"),
        "the newcomer held by the drain",
    )
    assert sf("job", "stop", blocker).code == 0  # the admin settles the blocker
    wait_for(sf, blocker, FINAL)
    status = sf_json(sf, "admin", "maintenance", "status")
    assert status["safe_to_restart"] and status["blockers"] == [] and status["pausing"] == []

    resumed = sf_json(sf, "admin", "maintenance", "resume")
    assert not resumed["active"]
    for run_id in resumable:
        view = wait_for(sf, run_id, FINAL)
        assert view["status"] == "succeeded" and len(view["attempts"]) == 2
        saved = int(view["attempts"][1]["resumed_from"].rsplit("-", 1)[1])
        assert steps(log_of(view, 1))[-1] >= saved  # paused after its last checkpoint
        assert steps(log_of(view, 2)) == list(range(saved + 1, 301))  # the count continues
    assert wait_for(sf, newcomer, FINAL)["status"] == "succeeded"


# ---- webhooks and accounting ------------------------------------------------------------------


class Receiver:
    """A webhook receiver on 127.0.0.1 that can be started after the server began to send."""

    def __init__(self) -> None:
        with socket.socket() as probe:  # a port nothing listens on until start()
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.got: list[tuple[dict[str, str], bytes]] = []
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def start(self) -> None:
        got = self.got

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                got.append((dict(self.headers), body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


MODULE_STARTED = int(time.time())


def verified(secret: str, headers: dict[str, str], body: bytes) -> dict[str, Any]:
    """The payload, after checking its signature and freshness as a receiver must."""
    ts = headers[TIMESTAMP_HEADER]
    want = hmac.new(secret.encode(), ts.encode() + b"." + body, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(headers[SIGNATURE_HEADER], f"sha256={want}")
    # Signed at delivery: after this module started and before now (a receiver refuses replays).
    assert MODULE_STARTED <= int(ts) <= time.time()
    payload = json.loads(body)
    assert isinstance(payload, dict)
    return payload


def test_a_receiver_down_for_a_while_still_gets_a_signed_payload_per_terminal_status(
    sf: Callable[..., Result], custom_lab: Callable[..., Lab]
) -> None:
    receiver = Receiver()
    made = sf_json(sf, "notify", "add", receiver.url, "--on", "succeeded,failed,stopped")
    secret = made["secret"]
    lab = custom_lab(steps=3)
    add_experiment(lab, "bad", lambda _: "#!/usr/bin/env bash\necho 'boom' >&2\nexit 3\n")
    add_experiment(lab, "long", never_checkpoints)
    ran = {"succeeded": submit(sf, lab, "c1"), "failed": submit(sf, lab, "bad")}
    ran["stopped"] = submit(sf, lab, "long")
    assert sf("job", "stop", ran["stopped"]).code == 0
    for status, run_id in ran.items():
        assert wait_for(sf, run_id, FINAL)["status"] == status

    def failed_tries() -> set[str]:
        log = sf_json(sf, "notify", "log", made["id"])["deliveries"]
        return {d["run_id"] for d in log if not d["ok"]}

    wait_until(lambda: failed_tries() >= set(ran.values()), "a failed try for every run")
    # Only this test's runs count: a run an earlier test of the module resumed may end
    # meanwhile, and the endpoint follows all of the user's runs.
    mine = set(ran.values())
    receiver.start()
    try:
        wait_until(
            lambda: mine <= {json.loads(b)["run_id"] for _, b in receiver.got}, "my 3 payloads"
        )
    finally:
        receiver.stop()
    got = (verified(secret, h, b) for h, b in receiver.got)
    payloads = {p["run_id"]: p for p in got if p["run_id"] in mine}
    assert {run_id: p["status"] for run_id, p in payloads.items()} == {
        run_id: status for status, run_id in ran.items()
    }
    assert payloads[ran["failed"]]["exit_code"] == 3
    log = sf_json(sf, "notify", "log", made["id"])["deliveries"]
    assert {d["run_id"] for d in log if d["ok"]} & mine == mine
    listed = sf_json(sf, "notify", "ls")["endpoints"]
    assert secret not in json.dumps(listed) and listed[0]["delivered"] >= 3
    check_usage_matches_the_attempts(sf)
    for args, text in (
        (("notify", "ls"), made["id"]),
        (("notify", "log"), ran["failed"]),
        (("admin", "usage", "--by", "project"), "GPU-HOURS"),
        (("status",), "GPU-hours: "),
    ):
        shown = sf(*args)
        assert shown.code == 0 and text in shown.out, shown.err + shown.out
        assert secret not in shown.out


def check_usage_matches_the_attempts(sf: Callable[..., Result]) -> None:
    """Once every run of the server has ended: its GPU-hours, from the attempts' own times."""
    expected = 0.0
    with connect(start=False) as client:
        for brief in client.list_runs(limit=1000).runs:
            view = client.get_run(brief.run_id)
            assert view.status.is_terminal, view.run_id
            for attempt in view.attempts:
                if attempt.started_at and attempt.ended_at:
                    hours = (attempt.ended_at - attempt.started_at).total_seconds() / 3600
                    expected += view.gpus * hours
    report = sf_json(sf, "admin", "usage", "--by", "user")
    assert report["total_gpu_hours"] == pytest.approx(expected, rel=1e-9, abs=1e-9)
    assert expected > 0
    mine = sf_json(sf, "status")["gpu_hours"]
    assert mine["total"] == pytest.approx(expected, rel=1e-9, abs=1e-9)
