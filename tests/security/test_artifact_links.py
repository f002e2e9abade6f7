"""What a job can learn through ``GET /runs/{id}/artifacts`` of a real server on 127.0.0.1 by
writing into its own ``out/``: nothing about files outside its run. A symbolic link to
``/etc/passwd``, to another run's file or folder, or ``out`` itself made a link, is not listed,
and the answer is byte for byte the same whether the target exists or not. A file name that is
not UTF-8 is listed (escaped), never a 5xx.

The job's writes are made here directly in the run's folder (what its ``train.sh`` would do);
the request is the attacker's.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from starforge.contract.api import API_PREFIX
from starforge.server.runtime import Runtime, build_runtime
from starforge.server.settings import load_settings
from tests.server.factories import TOKENS, insert_run

from .conftest import Live

ALICE = {"Authorization": f"Bearer {TOKENS['alice']}"}


@pytest.fixture
def rt(live: Live) -> Iterator[Runtime]:
    """The live server's database and storage, as the job (and the test) reach them."""
    runtime = build_runtime(load_settings(live.home))
    yield runtime
    runtime.engine.dispose()


def new_run(rt: Runtime, user: str) -> tuple[str, Path]:
    run_id = "r-" + uuid.uuid4().hex[:12]
    insert_run(rt, run_id, user=user)
    out = rt.storage.run_dir(user, "proj", "exp", run_id) / "out"
    out.mkdir(parents=True)
    return run_id, out


def artifacts(live: Live, run_id: str) -> httpx.Response:
    return httpx.get(f"{live.url}{API_PREFIX}/runs/{run_id}/artifacts", headers=ALICE, timeout=60)


def listed(resp: httpx.Response) -> list[dict[str, Any]]:
    assert resp.status_code == 200, resp.text
    return list(resp.json()["files"])


def test_links_in_out_reveal_nothing_about_their_targets(rt: Runtime, live: Live) -> None:
    other_id, other_out = new_run(rt, "bob")
    (other_out / "weights.bin").write_bytes(b"w" * 12345)
    (other_out / "ckpt").mkdir()
    (other_out / "ckpt" / "model.safetensors").write_bytes(b"m" * 777)
    run_id, out = new_run(rt, "alice")
    (out / "model.bin").write_bytes(b"x" * 10)
    (out / "sub").mkdir()
    (out / "sub" / "log.txt").write_bytes(b"y" * 3)
    links = {
        "passwd": Path("/etc/passwd"),
        "shadow": Path("/etc/shadow"),
        "etc": Path("/etc"),
        "stolen.bin": other_out / "weights.bin",
        "sub/theirs": other_out / "ckpt",
        "relative.bin": Path("..") / ".." / other_id / "out" / "weights.bin",
    }
    for name, target in links.items():
        (out / name).symlink_to(target)
    os.mkfifo(out / "pipe")  # not a regular file: not listed, and never opened

    first = artifacts(live, run_id)
    assert [f["path"] for f in listed(first)] == ["model.bin", "sub/log.txt"]
    assert [f["size"] for f in listed(first)] == [10, 3]
    said = first.text
    for word in ("passwd", "shadow", "stolen", "theirs", "relative", "weights", "12345", "777"):
        assert word not in said, said

    # The same links to targets that do not exist: the answer is the same, byte for byte.
    for name in links:
        (out / name).unlink()
        (out / name).symlink_to(Path("/nonexistent") / uuid.uuid4().hex)
    assert artifacts(live, run_id).content == first.content


def test_an_out_folder_that_is_a_link_lists_nothing(rt: Runtime, live: Live) -> None:
    _, other_out = new_run(rt, "bob")
    (other_out / "weights.bin").write_bytes(b"w" * 12345)
    run_id, out = new_run(rt, "alice")
    out.rmdir()
    out.symlink_to(other_out)
    resp = artifacts(live, run_id)
    assert listed(resp) == []
    assert "weights" not in resp.text
    out.unlink()
    out.symlink_to("/etc")
    assert listed(artifacts(live, run_id)) == []


def test_a_file_name_that_is_not_utf8_is_listed_escaped_never_a_5xx(
    rt: Runtime, live: Live
) -> None:
    run_id, out = new_run(rt, "alice")
    (out / "ok.txt").write_bytes(b"ok")
    with open(os.path.join(os.fsencode(out), b"ckpt-\xff\xfe.bin"), "wb") as fh:
        fh.write(b"abc")
    os.mkdir(os.path.join(os.fsencode(out), b"dir-\xc3\x28"))
    with open(os.path.join(os.fsencode(out), b"dir-\xc3\x28", b"inner.bin"), "wb") as fh:
        fh.write(b"a")
    files = listed(artifacts(live, run_id))
    assert [(f["path"], f["size"]) for f in files] == [
        ("ckpt-\\xff\\xfe.bin", 3),
        ("ok.txt", 2),
        ("dir-\\xc3(/inner.bin", 1),
    ]
