"""YAML bombs: a 3 KB billion-laughs config and 5,000-deep nesting are refused fast, with the file
named, at every place a config is read: `sf submit`, admission through the API, and the runner.
A non-UTF-8 config is a clear error too, never a 500 or a traceback."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from starforge.catalog.loader import get_method
from starforge.contract.api import API_PREFIX
from starforge.contract.env import Binding
from starforge.contract.jobspec import FileEntry, JobSpec, Manifest, Provenance
from starforge.contract.layout import StorageLayout
from starforge.project.lab import Lab
from starforge.server.app import create_app
from starforge.server.db.models import Run
from starforge.server.runtime import Runtime
from starforge.server.services import users
from starforge.server.settings import load_settings
from tests.conftest import Result, commit_all
from tests.server.factories import INVENTORY, PROFILES, TOKENS, FakeExecutor, request


def billion_laughs() -> bytes:
    lines = ["a: &a [" + ", ".join(['"lol"'] * 9) + "]"]
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 9) + "]")
    return ("\n".join(lines) + "\n").encode()


BOMBS = {
    "billion-laughs": (billion_laughs(), "aliases expand"),
    "deep-nesting": (b"x: " + b"[" * 5000 + b"]" * 5000 + b"\n", "nesting deeper"),
    "non-utf8": (b"lr: 0.1\nname: caf\xe9\n", "not UTF-8"),
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
        tmp_path / "home", inventory=INVENTORY, profiles=PROFILES, url="http://127.0.0.1:9999"
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
    req.manifest.files.append(
        FileEntry(path=CONFIG, sha256=rt.storage.put_bytes(data), size=len(data))
    )
    headers = {"Authorization": f"Bearer {TOKENS['alice']}"}
    resp = client.post("/jobs", json=req.model_dump(mode="json"), headers=headers)
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
