"""Manifests that could not be unpacked as sent are refused at admission, naming the path."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.server.factories import request

from .conftest import ALICE, runtime, wire

DIGEST = "0" * 64


def _entry(path: str, size: int = 1) -> dict[str, Any]:
    return {"path": path, "sha256": DIGEST, "size": size, "executable": False}


@pytest.mark.parametrize(
    ("entries", "named"),
    [
        ([_entry("experiments/exp/a\x00b.py")], "a\\x00b.py"),
        ([_entry("experiments/exp/a\nb.py")], "a\\nb.py"),
        ([_entry("experiments/exp/" + "n" * 256)], "nnnn"),
        ([_entry("experiments/../../etc/passwd")], "etc/passwd"),
        ([_entry("/etc/passwd")], "/etc/passwd"),
        ([_entry("experiments/exp/train.py"), _entry("experiments/exp/train.py")], "train.py"),
        ([_entry("experiments/exp/data"), _entry("experiments/exp/data/x.txt")], "data"),
        ([_entry("experiments/exp/big.bin", size=10**18)], "size"),
    ],
    ids=["nul", "newline", "long-component", "dotdot", "absolute", "duplicate", "clash", "size"],
)
def test_an_unpackable_manifest_is_refused_naming_the_path_and_no_run_is_made(
    client: TestClient, entries: list[dict[str, Any]], named: str
) -> None:
    rt = runtime(client)
    body = request(rt).model_dump(mode="json")
    body["manifest"]["files"] += entries
    resp = client.post("/jobs", json=body, headers=ALICE)
    err = wire(resp)
    assert resp.status_code == 400 and err["code"] == "usage.invalid_spec", resp.text
    assert all(e["path"].split(".")[0] == "manifest" for e in err["details"]["errors"])
    assert named in err["message"]
    assert client.get("/runs", headers=ALICE).json()["runs"] == []
    assert not (rt.settings.storage / "runs").exists()
