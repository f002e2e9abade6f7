"""A package uploaded in batches (its blobs in pack files, none as a file of its own) runs: the
server reads its config from the pack at admission and the runner unpacks it from the extents
its ``run.json`` names."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from starforge.project.lab import Lab
from starforge.server.settings import load_settings
from tests.conftest import Result
from tests.integration.conftest import wait_for

pytestmark = pytest.mark.integration


def test_a_run_whose_package_came_in_a_batch_unpacks_from_the_pack_and_succeeds(
    sf: Callable[..., Result], custom_lab: Callable[..., Lab], server_home: Path
) -> None:
    lab = custom_lab(steps=2)
    image = "registry.example/train:v1"
    got = sf("submit", "c1", "--profile", "h200:1", "--image", image, "--json", cwd=lab.root)
    assert got.code == 0, got.err
    run_id = str(got.json()["run_id"])  # type: ignore[index]
    assert wait_for(sf, run_id, {"succeeded", "failed"})["status"] == "succeeded"
    storage = load_settings(server_home).storage
    (run_json,) = storage.glob(f"runs/*/*/*/{run_id}/state/run.json")
    written = json.loads(run_json.read_text())
    package = {f["sha256"] for f in written["manifest"]["files"]}
    assert package and package <= set(written["packs"])  # every file was packed
    for digest in package:
        assert not (storage / "blobs" / "sha256" / digest[:2] / digest[2:]).exists()
    work = run_json.parent.parent / "work"
    assert (work / "experiments" / "c1" / "lab-id.txt").read_bytes() == (
        lab.root / "experiments" / "c1" / "lab-id.txt"
    ).read_bytes()
