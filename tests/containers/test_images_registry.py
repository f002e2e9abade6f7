"""Images at admission against a real OCI registry (``scripts/registry.sh``, Debian's
docker-registry on 127.0.0.1): a tag pinned to the digest the registry serves, a retag that leaves
a queued run alone, and each rejection (unknown tag, unknown repository, registry down, registry
not allowed). No podman here: images are pushed through the registry's HTTP API (the registry does
not care what a layer holds). Without a registry the tests skip, except under ``CI=true``, where
a skip would hide a missing service: there they fail.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from starforge.catalog.loader import get_method
from starforge.contract.api import API_PREFIX, SubmitResponse
from starforge.contract.auth import Role
from starforge.contract.errors import Rejected
from starforge.server import containers
from starforge.server import registry as registry_api
from starforge.server.app import create_app
from starforge.server.db.models import Run, User
from starforge.server.runtime import Runtime, build_runtime
from starforge.server.services.data import blobs, images
from starforge.server.services.runs import jobs
from starforge.server.services.scheduling import dispatch
from starforge.server.settings import load_settings
from tests.server.factories import (
    INVENTORY,
    PROFILES,
    TOKENS,
    FakeExecutor,
    request,
    run_row,
    spec,
)

pytestmark = pytest.mark.containers
REPO_ROOT = Path(__file__).resolve().parents[2]
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
_pushes = itertools.count(1)


def _registry_address() -> str | None:
    if os.environ.get("STARFORGE_TEST_REGISTRY"):
        return os.environ["STARFORGE_TEST_REGISTRY"]
    script = REPO_ROOT / "scripts" / "registry.sh"
    if shutil.which("docker-registry") is None:
        return None
    done = subprocess.run(["bash", str(script), "url"], capture_output=True, text=True)
    return done.stdout.strip() or None if done.returncode == 0 else None


@pytest.fixture(scope="module")
def registry() -> str:
    address = _registry_address()
    if address is None:
        message = "no registry: run `bash scripts/registry.sh start` (or scripts/test.sh)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return address


def _put_blob(client: httpx.Client, name: str, data: bytes) -> dict[str, object]:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    started = client.post(f"/v2/{name}/blobs/uploads/")
    assert started.status_code == 202, started.text
    location = started.headers["Location"]
    sep = "&" if "?" in location else "?"
    done = client.put(
        f"{location}{sep}digest={digest}",
        content=data,
        headers={"Content-Type": "application/octet-stream"},
    )
    assert done.status_code == 201, done.text
    return {
        "mediaType": "application/vnd.oci.image.layer.v1.tar",
        "digest": digest,
        "size": len(data),
    }


def push(registry: str, name: str, tag: str, headers: dict[str, str] | None = None) -> str:
    """Push a minimal OCI image (a fresh config each time) as ``name:tag``; its digest.
    ``headers``: an ``Authorization`` for a registry that wants one."""
    with httpx.Client(base_url=f"http://{registry}", timeout=10, headers=headers) as client:
        layer = _put_blob(client, name, f"layer {next(_pushes)}".encode())
        config_bytes = json.dumps(
            {
                "architecture": "amd64",
                "os": "linux",
                "rootfs": {"type": "layers", "diff_ids": [layer["digest"]]},
                "config": {"Env": [f"PUSH={next(_pushes)}"]},
            }
        ).encode()
        config = _put_blob(client, name, config_bytes)
        config["mediaType"] = "application/vnd.oci.image.config.v1+json"
        manifest = json.dumps(
            {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": config, "layers": [layer]}
        ).encode()
        put = client.put(
            f"/v2/{name}/manifests/{tag}", content=manifest, headers={"Content-Type": OCI_MANIFEST}
        )
        assert put.status_code == 201, put.text
        digest = put.headers["Docker-Content-Digest"]
        assert digest == "sha256:" + hashlib.sha256(manifest).hexdigest()
        return digest


def _runtime(tmp_path: Path, containers: str | None) -> Runtime:
    settings = load_settings(
        tmp_path / "home",
        inventory=INVENTORY,
        profiles=PROFILES,
        url="http://127.0.0.1:9999",
        containers=containers,
        registry_timeout_s=2.0,
    )
    rt = build_runtime(settings, executor=FakeExecutor())
    with rt.transaction() as session:
        from starforge.server.services.access import users

        for name, token in TOKENS.items():
            users.ensure_user(session, name, token)
    return rt


@pytest.fixture
def rt(tmp_path: Path) -> Iterator[Runtime]:
    runtime = _runtime(tmp_path, "podman")  # admission pins digests; nothing here runs podman
    yield runtime
    runtime.engine.dispose()


def submit(rt: Runtime, *, image: str, user: str = "alice") -> SubmitResponse:
    """A custom/custom submission with ``image`` as its --image ("" for none)."""
    req = request(rt)
    req = req.model_copy(update={"spec": req.spec.model_copy(update={"image": image})})
    for digest in req.manifest.digests():
        blobs.record(rt, user, digest)
    return jobs.submit(rt, user, req)


def _runs(rt: Runtime) -> int:
    with rt.transaction() as session:
        return session.scalar(select(func.count()).select_from(Run)) or 0


def test_a_tag_is_pinned_to_the_digest_the_registry_serves(rt: Runtime, registry: str) -> None:
    digest = push(registry, "lab/tiny", "1")
    answer = submit(rt, image=f"{registry}/lab/tiny:1")
    run = run_row(rt, answer.run_id)
    assert run.image == f"{registry}/lab/tiny@{digest}"
    assert any("pin a digest in production" in w for w in answer.warnings)
    with rt.transaction() as session:
        shown = jobs.view(rt, session.get(Run, answer.run_id))  # type: ignore[arg-type]
    assert (shown.image, shown.image_source) == (run.image, "flag")


def test_a_pinned_reference_is_kept_and_not_warned_about(rt: Runtime, registry: str) -> None:
    digest = push(registry, "lab/pinned", "1")
    answer = submit(rt, image=f"{registry}/lab/pinned@{digest}")
    assert run_row(rt, answer.run_id).image == f"{registry}/lab/pinned@{digest}"
    assert not any("pin a digest" in w for w in answer.warnings)


def test_a_retag_after_submission_leaves_the_queued_runs_digest(rt: Runtime, registry: str) -> None:
    first = push(registry, "lab/moving", "stable")
    queued = submit(rt, image=f"{registry}/lab/moving:stable").run_id
    second = push(registry, "lab/moving", "stable")  # the tag now names another image
    assert second != first
    assert run_row(rt, queued).image == f"{registry}/lab/moving@{first}"
    later = submit(rt, image=f"{registry}/lab/moving:stable").run_id
    assert run_row(rt, later).image == f"{registry}/lab/moving@{second}"


@pytest.mark.parametrize("what", ["tag", "repository"])
def test_an_unknown_tag_or_repository_is_rejected_and_nothing_is_created(
    rt: Runtime, registry: str, what: str
) -> None:
    push(registry, "lab/known", "1")
    ref = f"{registry}/lab/known:nope" if what == "tag" else f"{registry}/lab/unknown-repo:1"
    with pytest.raises(Rejected, match="not found: the registry has no such repository or tag"):
        submit(rt, image=ref)
    assert _runs(rt) == 0


def _dead_address() -> str:
    with socket.socket() as s:  # a port nobody listens on once the socket is closed
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def test_an_unreachable_registry_is_rejected_naming_its_address(rt: Runtime) -> None:
    dead = _dead_address()
    with pytest.raises(Rejected, match=f"image registry {dead} is unreachable") as caught:
        submit(rt, image=f"{dead}/lab/tiny:1")
    assert f"http://{dead}/v2/lab/tiny/manifests/1" in caught.value.message
    assert _runs(rt) == 0


def test_without_a_container_runtime_no_digest_is_resolved(tmp_path: Path) -> None:
    rt = _runtime(tmp_path, "none")
    dead = _dead_address()  # would be a rejection if it were asked
    answer = submit(rt, image=f"{dead}/lab/tiny:1")
    assert run_row(rt, answer.run_id).image == f"{dead}/lab/tiny:1"
    assert any("will not be used" in w for w in answer.warnings)
    rt.engine.dispose()


def test_an_admin_allows_and_denies_registries_and_admission_follows(
    rt: Runtime, registry: str
) -> None:
    push(registry, "lab/tiny", "1")
    with rt.transaction() as session:
        alice = session.scalar(select(User).where(User.name == "alice"))
        assert alice is not None
        alice.role = Role.ADMIN.value
    app = create_app(rt.settings, executor=rt.executor, run_loops=False)
    auth = {"Authorization": f"Bearer {TOKENS['alice']}"}
    with TestClient(app) as client:
        shown = client.get(f"{API_PREFIX}/admin/images", headers=auth).json()
        assert shown["registries"] == [] and "every registry is allowed" in shown["summary"]
        body = {"entry": "ghcr.io/lab", "allowed": True}
        listed = client.put(f"{API_PREFIX}/admin/registries", json=body, headers=auth).json()
        assert [e["entry"] for e in listed["registries"]] == ["ghcr.io/lab"]
        with pytest.raises(Rejected, match=f"image registry {registry} is not on") as caught:
            submit(app.state.runtime, image=f"{registry}/lab/tiny:1")
        assert f"sf admin registry allow {registry}" in (caught.value.hint or "")
        body = {"entry": registry, "allowed": True}
        client.put(f"{API_PREFIX}/admin/registries", json=body, headers=auth)
        assert submit(app.state.runtime, image=f"{registry}/lab/tiny:1").created
        for entry in ("ghcr.io/lab", registry):
            body = {"entry": entry, "allowed": False}
            listed = client.put(f"{API_PREFIX}/admin/registries", json=body, headers=auth).json()
        assert listed["registries"] == []
        absent = client.put(f"{API_PREFIX}/admin/registries", json=body, headers=auth)
        assert absent.status_code == 400 and "not on the allowlist" in absent.text


def test_a_framework_default_set_by_an_admin_is_the_image_a_run_gets(
    rt: Runtime, registry: str
) -> None:
    digest = push(registry, "lab/trl-default", "2")
    with rt.transaction() as session:
        images.set_default(session, "trl", f"{registry}/lab/trl-default:2", "alice")
        defaults = images.framework_defaults(session)
    got = images.admit_image(
        spec(method_id="trl/sft"),
        get_method("trl/sft"),
        settings=rt.settings,
        defaults=defaults,
        entries=[],
    )
    assert (got.ref, got.source) == (f"{registry}/lab/trl-default@{digest}", "framework-default")


@pytest.mark.parametrize(
    ("setting", "catalog_used"), [(None, False), ("none", False), ("podman", True)]
)
def test_the_catalogs_image_applies_only_where_containers_are_set(
    tmp_path: Path, setting: str | None, catalog_used: bool
) -> None:
    rt = _runtime(tmp_path, setting)
    method = get_method("trl/sft")
    catalog = method.runtime_version(None)[1].image
    assert catalog  # the built-in trl methods name an image
    admit = functools.partial(
        images.admit_image,
        spec(method_id="trl/sft"),
        method,
        settings=rt.settings,
        defaults={},
        entries=["registry.lab:5000"],  # the catalog's registry is not allowed here
    )
    if catalog_used:
        with pytest.raises(Rejected, match=f"image registry {catalog.split('/')[0]} is not on"):
            admit()
    else:  # a laptop with podman and no network still runs catalog methods, on the host
        assert (admit().ref, admit().source) == ("", None)
    rt.engine.dispose()


def test_the_executor_is_handed_the_pinned_digest_not_the_tag(rt: Runtime, registry: str) -> None:
    digest = push(registry, "lab/handed", "1")
    run_id = submit(rt, image=f"{registry}/lab/handed:1").run_id
    push(registry, "lab/handed", "1")  # retagged before placement
    [order] = dispatch.schedule_pass(rt)
    assert order.run_id == run_id and order.image == f"{registry}/lab/handed@{digest}"


@pytest.mark.parametrize(
    ("registry_host", "insecure", "scheme"),
    [
        ("127.0.0.1:5000", [], "http"),
        ("localhost:5000", [], "http"),
        ("[::1]:5000", [], "http"),
        ("ghcr.io", [], "https"),
        ("registry.lab:5000", ["registry.lab:5000"], "http"),
        ("docker.io", [], "https"),
    ],
)
def test_loopback_and_listed_insecure_registries_are_spoken_to_over_plain_http(
    registry_host: str, insecure: list[str], scheme: str
) -> None:
    assert registry_api.base_url(registry_host, insecure).startswith(f"{scheme}://")


@pytest.fixture
def no_podman(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A machine where podman cannot be found (the once-per-process probe asked afresh)."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    containers.podman_works.cache_clear()
    yield
    containers.podman_works.cache_clear()


@pytest.mark.usefixtures("no_podman")
def test_a_server_that_requires_containers_without_podman_refuses_an_image(
    tmp_path: Path,
) -> None:
    rt = _runtime(tmp_path, "required")
    with pytest.raises(Rejected, match=r"requires containers .* podman does not work"):
        submit(rt, image="registry.example/train:v1")
    assert _runs(rt) == 0
    rt.engine.dispose()
