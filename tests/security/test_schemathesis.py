"""schemathesis against the OpenAPI a real server serves, with a real (admin) token: no server
error (5xx) and no conformance failure (every status, content type, header and body the server
answers is the one its schema documents; a 405 names the allowed methods in ``Allow``).

The budget is small so the suite stays fast; for a longer run raise it with the environment:
``SF_FUZZ_EXAMPLES=200 SF_FUZZ_SEED=7 pytest tests/security/test_schemathesis.py -m fuzz``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.server.factories import eventually

pytestmark = pytest.mark.fuzz
pytest.importorskip(
    "schemathesis", reason="schemathesis is in the dev extra (pip install -e .[dev])"
)

CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_headers_conformance",
    "response_schema_conformance",
    "unsupported_method",
    "allow_header_conformance",
    "missing_required_header",
)


@dataclass
class Served:
    url: str
    token: str


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    home = tmp_path_factory.mktemp("fuzz-home")
    env = {k: v for k, v in os.environ.items() if not k.startswith("STARFORGE_")}
    env["STARFORGE_CONTAINERS"] = "none"  # jobs on the host: the images live in no registry
    log = (home / "stdout.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "starforge.server", "--home", str(home), "--port", "0"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    info = home / "server" / "server.json"
    try:
        eventually(lambda: info.is_file() or proc.poll() is not None, what="the server's start")
        assert proc.poll() is None, (home / "stdout.log").read_text()
        token = (home / "server" / "local-token").read_text().strip()
        yield Served(url=json.loads(info.read_text())["url"], token=token)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def test_the_served_openapi_holds_under_schemathesis(served: Served, tmp_path: Path) -> None:
    command = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "run",
        f"{served.url}/openapi.json",
        "--header",
        f"Authorization: Bearer {served.token}",
        "--checks",
        ",".join(CHECKS),
        "--phases",
        "examples,coverage,fuzzing",
        "--max-examples",
        os.environ.get("SF_FUZZ_EXAMPLES", "3"),
        "--seed",
        os.environ.get("SF_FUZZ_SEED", "1"),
        "--workers",
        "1",
        "--no-color",
    ]
    done = subprocess.run(
        command, cwd=tmp_path, capture_output=True, text=True, timeout=540, check=False
    )
    report = done.stdout + done.stderr
    summary = report[report.find("SUMMARY") :] if "SUMMARY" in report else report[-4000:]
    assert done.returncode == 0, summary[:6000]
    tested = re.search(r"Tested: (\d+)", summary)
    assert tested is not None and int(tested.group(1)) >= 20, summary[:6000]  # every route ran
