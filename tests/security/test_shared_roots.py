"""Absolute (shared) inputs: admitted only under a configured shared root, and refused without
revealing whether the path exists (no existence oracle for /etc/shadow or the server's token)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from starforge.contract.jobspec import InputKind, InputRef, Inputs
from starforge.server.settings import Settings
from tests.server.factories import request

from .conftest import ALICE, client_for, runtime


def _submit(client: TestClient, path: str) -> tuple[int, dict]:
    rt = runtime(client)
    inputs = Inputs(train_data=InputRef(kind=InputKind.SHARED, value=path))
    body = request(rt, inputs=inputs).model_dump(mode="json")
    resp = client.post("/jobs", json=body, headers=ALICE)
    return resp.status_code, resp.json()


def _runs(client: TestClient) -> list[object]:
    return list(client.get("/runs", headers=ALICE).json()["runs"])


@pytest.mark.parametrize("path", ["/etc/shadow", "/etc/no-such-file-here", "/../etc/passwd"])
def test_an_absolute_input_is_refused_without_shared_roots_whether_it_exists_or_not(
    client: TestClient, path: str
) -> None:
    status, body = _submit(client, path)
    assert status == 422 and body["code"] == "admission.rejected"
    assert "not under a shared root" in body["message"]
    assert "shared_roots" in body["hint"] and "(none now)" in body["hint"]
    assert "exist" not in body["message"]  # the same answer for a real and a made-up path
    assert _runs(client) == []


def test_the_servers_own_token_file_is_refused_like_any_other_path(client: TestClient) -> None:
    rt = runtime(client)
    token_file = rt.settings.server_dir / "local-token"
    token_file.write_text("secret\n")
    real = _submit(client, str(token_file))
    made_up = _submit(client, str(rt.settings.server_dir / "no-such-token"))
    assert real[0] == made_up[0] == 422
    assert real[1]["message"].replace(str(token_file), "X") == made_up[1]["message"].replace(
        str(rt.settings.server_dir / "no-such-token"), "X"
    )
    assert _runs(client) == []


@pytest.fixture
def shared(tmp_path: Path) -> Path:
    folder = tmp_path / "shared"
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "train.jsonl").write_text("{}\n")
    return folder


@pytest.fixture
def rooted(settings: Settings, shared: Path) -> Iterator[TestClient]:
    with client_for(settings.model_copy(update={"shared_roots": [shared]})) as c:
        yield c


def test_an_input_under_a_shared_root_is_admitted(rooted: TestClient, shared: Path) -> None:
    status, body = _submit(rooted, str(shared / "data" / "train.jsonl"))
    assert status == 201, body
    assert len(_runs(rooted)) == 1


def test_a_path_that_climbs_out_of_a_shared_root_is_refused(
    rooted: TestClient, shared: Path
) -> None:
    status, body = _submit(rooted, f"{shared}/data/../../../etc/passwd")
    assert status == 422 and "not under a shared root" in body["message"]
    assert str(shared) in body["hint"]
    assert _runs(rooted) == []


def test_a_symbolic_link_inside_a_shared_root_cannot_lead_out_of_it(
    rooted: TestClient, shared: Path
) -> None:
    os.symlink("/etc/passwd", shared / "data" / "innocent.jsonl")
    status, body = _submit(rooted, str(shared / "data" / "innocent.jsonl"))
    assert status == 422 and "leads out of the shared roots" in body["message"]
    assert _runs(rooted) == []


def test_a_missing_path_under_a_shared_root_is_named_missing(
    rooted: TestClient, shared: Path
) -> None:
    status, body = _submit(rooted, str(shared / "data" / "nope.jsonl"))
    assert status == 422 and "does not exist" in body["message"]
    assert _runs(rooted) == []
