"""One run per ``sf submit`` invocation, through the real server: two identical submits started
at once make two runs, and an invocation whose answer was lost retries with its own key and gets
the one run it made.

The submits reach the server through a small proxy in this process that can hold or drop the
answers to ``POST /jobs``; everything else passes through untouched.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import httpx
import pytest

from starforge.client import config
from starforge.project.lab import Lab
from tests.conftest import Result

pytestmark = pytest.mark.integration
IMAGE = "registry.example/train:v1"
SUBMIT = ["submit", "c1", "--profile", "h200:1", "--image", IMAGE, "--json"]
HOP_BY_HOP = {"content-length", "transfer-encoding", "connection", "content-encoding"}


class Proxy(BaseHTTPRequestHandler):
    """Forwards every request to ``upstream``; ``POST /jobs`` first waits at ``barrier`` (when
    set), and its answer is dropped (the connection closed unanswered) while ``drop`` > 0."""

    upstream: ClassVar[str] = ""
    barrier: ClassVar[threading.Barrier | None] = None
    drop: ClassVar[int] = 0
    keys: ClassVar[list[str]] = []  # the idempotency key of each POST /jobs, in arrival order
    arrived: ClassVar[threading.Event] = threading.Event()  # set by the first POST /jobs
    lock = threading.Lock()

    def _forward(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        submit = self.command == "POST" and self.path.endswith("/jobs")
        if submit:
            assert body is not None
            with self.lock:
                self.keys.append(json.loads(body)["idempotency_key"])
                self.arrived.set()
            if self.barrier is not None:
                self.barrier.wait()  # both submits are in flight at once
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
        answer = httpx.request(
            self.command, self.upstream + self.path, content=body, headers=headers, timeout=60
        )
        with self.lock:
            dropping = submit and Proxy.drop > 0
            if dropping:
                Proxy.drop -= 1
        if dropping:
            self.close_connection = True  # the server made its run; the client hears nothing
            return
        self.send_response(answer.status_code)
        for key, value in answer.headers.items():
            if key.lower() not in HOP_BY_HOP:
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(answer.content)))
        self.end_headers()
        self.wfile.write(answer.content)

    do_GET = do_POST = do_PUT = _forward

    def log_message(self, *_: object) -> None:
        pass


@contextmanager
def proxy(barrier: threading.Barrier | None = None, drop: int = 0) -> Iterator[str]:
    info = config.read_server_file()
    assert info is not None
    Proxy.upstream, Proxy.barrier, Proxy.drop, Proxy.keys = str(info["url"]), barrier, drop, []
    Proxy.arrived = threading.Event()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        if barrier is not None:
            barrier.abort()  # a submit that never came must not hold the other forever
        server.shutdown()
        server.server_close()
        thread.join()


def sf_process(lab: Lab, url: str) -> subprocess.Popen[str]:
    """``sf submit`` as a process of its own (as a user's second terminal would run it)."""
    env = {**os.environ, "STARFORGE_SERVER": url, "STARFORGE_TOKEN": config.read_local_token()}
    return subprocess.Popen(
        [sys.executable, "-m", "starforge.cli.main", *SUBMIT],
        cwd=lab.root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def answer_of(process: subprocess.Popen[str]) -> dict[str, object]:
    out, err = process.communicate(timeout=180)
    assert process.returncode == 0, err + out
    body = json.loads(out)
    assert isinstance(body, dict)
    return body


def my_runs(sf: Callable[..., Result]) -> set[str]:
    listed = sf("job", "ls", "--json", "-n", "500").json()
    assert isinstance(listed, list)
    return {str(r["run_id"]) for r in listed}


def test_two_identical_submits_started_at_once_make_two_runs(
    sf: Callable[..., Result], custom_lab: Callable[..., Lab]
) -> None:
    lab = custom_lab(steps=1)
    before = my_runs(sf)
    with proxy(barrier=threading.Barrier(2, timeout=120)) as url:
        first = sf_process(lab, url)
        # The second starts while the first's request is in flight (its key already recorded).
        assert Proxy.arrived.wait(120), "the first submit never reached POST /jobs"
        second = sf_process(lab, url)
        answers = [answer_of(first), answer_of(second)]
    assert len(set(Proxy.keys)) == 2  # each invocation sent a key of its own
    assert all(a["created"] for a in answers)
    made = {str(a["run_id"]) for a in answers}
    assert len(made) == 2 and my_runs(sf) - before == made


def test_a_submit_whose_answer_is_lost_retries_with_its_key_and_gets_its_one_run(
    sf: Callable[..., Result], custom_lab: Callable[..., Lab]
) -> None:
    lab = custom_lab(steps=1)
    before = my_runs(sf)
    with proxy(drop=1) as url:
        answer = answer_of(sf_process(lab, url))
    assert len(Proxy.keys) == 2 and len(set(Proxy.keys)) == 1  # the same request, sent twice
    assert answer["created"] is False  # the first request made it
    assert my_runs(sf) - before == {str(answer["run_id"])}
    pending = list((Path(os.environ["STARFORGE_HOME"]) / "pending").glob("*.json"))
    assert pending == []  # answered: nothing left for a rerun to take over
