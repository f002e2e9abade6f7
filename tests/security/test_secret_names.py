"""A secret may not take a name the platform gives the job: tried through ``sf secret set``, a
real server's ``POST /secrets``, and a submission asking for it (``--secret`` and a config's
``secrets:``, ``as: file`` too). Each is refused naming the reserved list, and nothing is stored.

(A secret named ``FORGE_OUT_DIR`` once made a run "succeed" with its output elsewhere and no
metrics: the runner puts secrets in the job's environment after the platform's variables.)
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from starforge.contract.api import API_PREFIX
from starforge.contract.jobspec import FileEntry, Manifest
from starforge.contract.secrets import SecretRequest, reserved_list, reserved_names
from tests.conftest import Result
from tests.server.factories import TOKENS, spec

from .conftest import Live

ALICE = {"Authorization": f"Bearer {TOKENS['alice']}"}
# Every exact name, and names under each reserved prefix.
RESERVED = [
    *sorted(reserved_names()),
    "FORGE_DATASET_OUT_DIR",
    "STARFORGE_ANYTHING",
    "MASTER_ANYTHING",
    "TORCHELASTIC_RUN_ID",
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "LD_AUDIT",
    "PYTHONPATH",
    "PYTHONSTARTUP",
    "PYTHONHOME",
]
# The brief's list, spelled out: the test fails if a name drops out of the rule.
MUST = {
    "FORGE_OUT_DIR", "FORGE_RUN_ID", "STARFORGE_TOKEN", "STARFORGE_ENDPOINT", "RANK",
    "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
    "CUDA_VISIBLE_DEVICES", "NPROC_PER_NODE", "NODE_RANK", "NNODES", "HF_HOME",
    "HF_HUB_OFFLINE", "PATH", "HOME", "PYTHONUNBUFFERED",
}  # fmt: skip


def test_every_variable_the_platform_sets_is_in_the_reserved_rule() -> None:
    assert set(RESERVED) >= MUST


@pytest.mark.parametrize("name", RESERVED)
def test_sf_secret_set_refuses_a_reserved_name_naming_the_list(
    name: str, sf: Callable[..., Result], sf_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", _Unread())
    got = sf("secret", "set", name)
    assert got.code == 2, got.err
    assert "Traceback" not in got.err + got.out
    assert f"secret name {name!r} is reserved" in got.err
    assert reserved_list() in " ".join(got.err.split())  # the list, whatever the wrapping
    assert not (sf_home / "server" / "server.json").exists()  # refused before any server


class _Unread:
    """A standard input that fails the test if the value is read: the name is refused first."""

    def isatty(self) -> bool:
        return False

    def read(self, *_: Any) -> str:
        raise AssertionError("the value was read for a reserved name")


def test_sf_secret_set_still_takes_hf_token_and_names_of_ones_own(
    sf: Callable[..., Result], monkeypatch: pytest.MonkeyPatch, live: Live
) -> None:
    monkeypatch.setenv("STARFORGE_SERVER", live.url)
    monkeypatch.setenv("STARFORGE_TOKEN", TOKENS["alice"])
    for name in ("HF_TOKEN", "WANDB_API_KEY", "MY_FORGE_OUT_DIR", "path"):
        monkeypatch.setattr("sys.stdin", _Value("s3cret-value"))
        got = sf("secret", "set", name)
        assert got.code == 0, got.err
    listed = {s["name"] for s in _secrets(live)}
    assert {"HF_TOKEN", "WANDB_API_KEY", "MY_FORGE_OUT_DIR", "path"} <= listed


class _Value:
    def __init__(self, value: str) -> None:
        self.value = value

    def isatty(self) -> bool:
        return False

    def read(self, *_: Any) -> str:
        return self.value


@pytest.fixture
def http(live: Live) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live.url + API_PREFIX, headers=ALICE, timeout=60) as client:
        yield client


def _secrets(live: Live) -> list[dict[str, Any]]:
    resp = httpx.get(f"{live.url}{API_PREFIX}/secrets", headers=ALICE, timeout=60)
    assert resp.status_code == 200, resp.text
    return list(resp.json()["secrets"])


def test_the_server_refuses_a_reserved_name_from_any_client(http: httpx.Client, live: Live) -> None:
    for name in RESERVED:
        for lab in (False, True):
            resp = http.post("/secrets", json={"name": name, "value": "x" * 8, "lab": lab})
            assert resp.status_code == 400, (name, resp.text)
            body = resp.json()
            assert body["code"] == "usage.invalid_name", body
            assert f"secret name {name!r} is reserved" in body["message"]
            assert reserved_list() in body["message"]
            assert body["details"]["reserved"] == reserved_list()
    assert not {s["name"] for s in _secrets(live)} & set(RESERVED)  # nothing was stored


# ---- admission: a run asking for a reserved name ----------------------------------------------


def _upload(http: httpx.Client, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    resp = http.put(f"/blobs/{digest}", content=data)
    assert resp.status_code == 201, resp.text
    return digest


def _submission(http: httpx.Client, config: dict[str, Any], flags: list[str]) -> dict[str, Any]:
    files = {
        "experiments/exp/train.sh": b"#!/usr/bin/env bash\necho hello\n",
        "experiments/exp/config.yaml": yaml.safe_dump(config).encode(),
    }
    manifest = Manifest(
        files=[
            FileEntry(path=path, sha256=_upload(http, data), size=len(data))
            for path, data in sorted(files.items())
        ]
    )
    job = spec(profiles=["h200:1"]).model_copy(
        update={"secrets": [SecretRequest(name=n) for n in flags]}
    )
    return {
        "spec": job.model_dump(mode="json"),
        "manifest": manifest.model_dump(mode="json"),
        "idempotency_key": uuid.uuid4().hex,
    }


def _refused_at_admission(http: httpx.Client, body: dict[str, Any], name: str) -> None:
    resp = http.post("/jobs", json=body)
    assert resp.status_code == 400, (name, resp.text)
    error = resp.json()
    assert error["code"] == "usage.invalid_name", error
    assert error["details"]["reserved_secrets"] == [name]
    assert name in error["message"] and reserved_list() in error["message"]


@pytest.mark.parametrize("mount", ["env", "file", "flag"])
def test_admission_refuses_a_run_asking_for_a_reserved_name(http: httpx.Client, mount: str) -> None:
    for name in RESERVED:
        if mount == "flag":  # sf submit --secret NAME, or any client's spec
            body = _submission(http, {"lr": 0.1}, [name])
        else:
            body = _submission(http, {"secrets": [{"name": name, "as": mount}]}, [])
        _refused_at_admission(http, body, name)
    assert http.get("/runs").json()["runs"] == []  # nothing was created


def test_as_file_may_not_reach_a_reserved_name_through_its_file_variable(
    http: httpx.Client,
) -> None:
    # FORGE as a file would set FORGE_FILE; PYTHON, PYTHON_FILE: the platform's prefixes.
    for name in ("FORGE", "STARFORGE", "PYTHON"):
        config = {"secrets": [{"name": name, "as": "file"}]}
        _refused_at_admission(http, _submission(http, config, []), name)
