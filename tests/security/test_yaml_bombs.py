"""YAML bombs: a 3 KB billion-laughs config and 5,000-deep nesting are refused fast, with the file
named, at every place a config is read: `sf submit`, admission through the API, and the runner.
A non-UTF-8 config is a clear error too, never a 500 or a traceback.

Sent straight to a real server on 127.0.0.1 as an attacker would (blobs uploaded, the JobSpec
POSTed, no CLI on the way): values outside the accepted YAML subset that once answered 500 (a
5,000-digit integer, ``!!binary``, ``!!set``, ``!!timestamp``) and a 2.3 KB ``defaults:`` fan-out
that named 91,126 files (15 s of server CPU) are a 400 naming the file and the rule or limit, and
nothing is created. A plain date is accepted as the string it is written as.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from starforge.catalog.loader import get_method
from starforge.contract.api import API_PREFIX, SubmitRequest
from starforge.contract.config import MAX_CONFIG_FILES
from starforge.contract.env import Binding
from starforge.contract.jobspec import FileEntry, JobSpec, Manifest, Provenance
from starforge.contract.layout import StorageLayout
from starforge.project.lab import Lab
from starforge.server.app import create_app
from starforge.server.db.models import Run
from starforge.server.runtime import Runtime
from starforge.server.services.access import users
from starforge.server.settings import load_settings
from tests.conftest import Result, commit_all
from tests.security.conftest import ALICE, Live
from tests.server.factories import (
    INVENTORY,
    PROFILES,
    TOKENS,
    FakeExecutor,
    request,
    spec,
)


def billion_laughs() -> bytes:
    lines = ["a: &a [" + ", ".join(['"lol"'] * 9) + "]"]
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 9) + "]")
    return ("\n".join(lines) + "\n").encode()


BOMBS = {
    "billion-laughs": (billion_laughs(), "aliases expand"),
    "deep-nesting": (b"x: " + b"[" * 5000 + b"]" * 5000 + b"\n", "nesting deeper"),
    "non-utf8": (b"lr: 0.1\nname: caf\xe9\n", "not UTF-8"),
    "huge-integer": (b"seed: " + b"7" * 5000 + b"\n", "an integer of 5000 digits"),
    "binary-tag": (b"blob: !!binary aGVsbG8=\n", "the tag !!binary is not allowed"),
}
CONFIG = "experiments/c1/config.yaml"


def test_the_billion_laughs_file_is_small() -> None:
    assert len(billion_laughs()) < 3 * 1024


@pytest.mark.parametrize("bomb", sorted(BOMBS))
def test_sf_submit_refuses_the_config_naming_the_file(
    bomb: str, new_lab: Callable[..., Lab], sf: Callable[..., Result], sf_home: Path
) -> None:
    lab = new_lab(experiments_={"c1": "custom/custom"})
    data, why = BOMBS[bomb]
    (lab.root / CONFIG).write_bytes(data)
    commit_all(lab.root)
    started = time.monotonic()
    result = sf(
        "submit", "c1", "--profile", "h200:1", "--image", "registry.example/train:v1",
        "--observability-url", "https://wandb.example/t/l", cwd=lab.root,
    )  # fmt: skip
    assert result.code == 2, result.err
    assert CONFIG in result.err and why in result.err
    assert "Traceback" not in result.err
    assert time.monotonic() - started < 30  # refused, not expanded (generous on a loaded CI box)


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    settings = load_settings(
        tmp_path / "home",
        inventory=INVENTORY,
        profiles=PROFILES,
        url="http://127.0.0.1:9999",
        isolation="none",  # jobs never start here; the members' wall is tested elsewhere
    )
    app = create_app(
        settings.model_copy(update={"embedded": False}), executor=FakeExecutor(), run_loops=False
    )
    with TestClient(app, base_url="http://testserver" + API_PREFIX) as c:
        rt: Runtime = app.state.runtime
        rt.pick_port = lambda: 40000  # no sockets in unit tests
        with rt.transaction() as session:
            for name, token in TOKENS.items():
                users.ensure_user(session, name, token)
        yield c


@pytest.mark.parametrize("bomb", sorted(BOMBS))
def test_admission_refuses_the_config_through_the_api(bomb: str, client: TestClient) -> None:
    rt: Runtime = client.app.state.runtime  # type: ignore[attr-defined]
    data, why = BOMBS[bomb]
    req = request(rt, experiment="c1")
    digest = hashlib.sha256(data).hexdigest()
    assert client.put(f"/blobs/{digest}", content=data, headers=ALICE).status_code == 201
    req.manifest.files.append(FileEntry(path=CONFIG, sha256=digest, size=len(data)))
    resp = client.post("/jobs", json=req.model_dump(mode="json"), headers=ALICE)
    assert resp.status_code == 400, resp.text
    assert resp.json()["code"] == "usage.config"
    assert CONFIG in resp.json()["message"] and why in resp.json()["message"]
    with rt.transaction() as session:
        assert session.scalar(select(func.count()).select_from(Run)) == 0


def put_blob(root: Path, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    path = StorageLayout(root).blob(digest)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return digest


@pytest.mark.parametrize("bomb", sorted(BOMBS))
def test_the_runner_refuses_the_config_before_launching(bomb: str, tmp_path: Path) -> None:
    storage = tmp_path / "storage"
    data, why = BOMBS[bomb]
    files = {"experiments/c1/train.sh": b"echo should-not-run\n", CONFIG: data}
    manifest = Manifest(
        files=[
            FileEntry(path=p, sha256=put_blob(storage, d), size=len(d), executable=p.endswith("sh"))
            for p, d in files.items()
        ]
    )
    spec = JobSpec(
        project="lab",
        experiment="c1",
        method=get_method("custom/custom").ref(),
        profiles=["h200:1"],
        provenance=Provenance(git_commit="a" * 40, client_version="0.1.0"),
    )
    run_dir = storage / "runs" / "u" / "lab" / "c1" / "r-0000000001"
    (run_dir / "state").mkdir(parents=True)
    (run_dir / "state" / "run.json").write_text(
        json.dumps(
            {"spec": spec.model_dump(mode="json"), "manifest": manifest.model_dump(mode="json")}
        )
    )
    binding = Binding(
        run_id="r-0000000001",
        attempt=1,
        user="u",
        storage_root=str(storage),
        run_dir=str(run_dir),
        work_dir=str(run_dir / "work"),
        out_dir=str(run_dir / "out"),
        log_path=str(run_dir / "logs/attempt-1.log"),
        visible_devices=[0],
    )
    bp = run_dir / "state" / "attempt-1.node-0.binding.json"
    bp.write_text(binding.model_dump_json())
    proc = subprocess.run(
        [sys.executable, "-m", "starforge.runner", str(bp)], capture_output=True, text=True
    )
    log = (run_dir / "logs" / "attempt-1.log").read_text()
    assert proc.returncode == 2, log
    assert CONFIG in log and why in log
    assert "should-not-run" not in log and "Traceback" not in log + proc.stderr


# ---- straight to a real server: the accepted YAML subset and the bounds of `defaults` ----------


def post_package(live: Live, files: dict[str, bytes]) -> httpx.Response:
    """Upload ``files`` (plus the custom method's train.sh) as alice and POST the submission."""
    files = {"experiments/c1/train.sh": b"echo should-not-run\n", **files}
    entries = []
    with httpx.Client(base_url=live.url + API_PREFIX, headers=ALICE, timeout=120) as http:
        for path, data in files.items():
            digest = hashlib.sha256(data).hexdigest()
            assert http.put(f"/blobs/{digest}", content=data).status_code == 201
            entry = FileEntry(path=path, sha256=digest, size=len(data), executable=".sh" in path)
            entries.append(entry)
        body = SubmitRequest(
            spec=spec(experiment="c1", profiles=["h200:1"]),
            manifest=Manifest(files=entries),
            idempotency_key=hashlib.sha256(repr(files).encode()).hexdigest()[:32],
        )
        return http.post("/jobs", json=body.model_dump(mode="json"))


def assert_refused(live: Live, resp: httpx.Response, *phrases: str) -> None:
    assert resp.status_code == 400, resp.text
    error = resp.json()
    assert error["code"] == "usage.config", error
    assert all(p in error["message"] for p in phrases), error
    assert error["hint"], error
    with httpx.Client(base_url=live.url + API_PREFIX, headers=ALICE) as http:
        assert http.get("/runs").json()["runs"] == []
    runs = load_settings(live.home).storage / "runs"
    assert not runs.exists() or not any(runs.rglob("*"))


OUTSIDE_THE_SUBSET = {  # each answered 500 before the loader kept to JSON's data model
    "a 5,000-digit integer": (b"n: " + b"1" * 5000, "an integer of 5000 digits"),
    "!!binary": (b"b: !!binary aGVsbG8=", "the tag !!binary is not allowed"),
    "!!set": (b"s: !!set {a, b}", "the tag !!set is not allowed"),
    "!!timestamp 2001-99-99": (b"t: !!timestamp 2001-99-99", "the tag !!timestamp is not allowed"),
    ".nan (PostgreSQL's json refuses it)": (b"x: .nan", "'.nan' is not a finite number"),
    "an integer key": (b"1: one", "the key '1' reads as int, not a string"),
}


@pytest.mark.parametrize("case", sorted(OUTSIDE_THE_SUBSET))
def test_a_value_outside_the_yaml_subset_is_a_400_naming_file_and_line(
    case: str, live: Live
) -> None:
    data, why = OUTSIDE_THE_SUBSET[case]
    resp = post_package(live, {CONFIG: b"lr: 0.1\n" + data + b"\n"})
    assert_refused(live, resp, f"{CONFIG}:2: YAML refused: ", why)


def fan_out() -> dict[str, bytes]:
    """45 references per level on 3 levels: 2.3 KB of YAML naming 91,126 files to compose."""

    def names(ref: str) -> bytes:
        return ("defaults: [" + ", ".join([ref] * 45) + "]\n").encode()

    leaf = "".join(f"key{i}: {{lr: 0.1, steps: {i}, name: n{i}}}\n" for i in range(12))
    return {
        CONFIG: names("../../configs/l1.yaml"),
        "configs/l1.yaml": names("l2.yaml"),
        "configs/l2.yaml": names("l3.yaml"),
        "configs/l3.yaml": leaf.encode(),
    }


def test_a_defaults_fan_out_is_refused_by_its_count_naming_the_limit(live: Live) -> None:
    files = fan_out()
    assert sum(len(d) for d in files.values()) < 2.4 * 1024
    resp = post_package(live, files)
    # The answer names the limit on files composed, which is counted before any merge: the
    # composition it would have cost (91,126 merges) is never started.
    assert_refused(live, resp, CONFIG, f"more than {MAX_CONFIG_FILES} files")
    assert "docs/methods.md" in resp.json()["hint"]


def test_a_date_is_admitted_as_the_string_it_is_written_as(client: TestClient) -> None:
    rt: Runtime = client.app.state.runtime  # type: ignore[attr-defined]
    data = b"start: 2001-12-14\nat: 2001-12-14 21:59:43.10 -5\n"
    req = request(rt, experiment="c1")
    digest = hashlib.sha256(data).hexdigest()
    assert client.put(f"/blobs/{digest}", content=data, headers=ALICE).status_code == 201
    req.manifest.files.append(FileEntry(path=CONFIG, sha256=digest, size=len(data)))
    resp = client.post("/jobs", json=req.model_dump(mode="json"), headers=ALICE)
    assert resp.status_code == 201, resp.text
    with rt.transaction() as session:
        run = session.get(Run, resp.json()["run_id"])
        assert run is not None and run.config is not None
        assert run.config["start"] == "2001-12-14"
        assert run.config["at"] == "2001-12-14 21:59:43.10 -5"
