"""Real podman for the tests under tests/containers (scripts/podman.sh installs it).

Without podman these tests skip, except under CI (``CI=true``), where a missing podman fails
them. Images are made here, offline, from the host's static busybox with ``podman import``.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from starforge.catalog.loader import get_method
from starforge.contract.env import Binding
from starforge.contract.jobspec import FileEntry, JobSpec, Manifest, Provenance
from starforge.contract.layout import StorageLayout

BASH_SHIM = b'#!/bin/sh\nexec /bin/sh "$@"\n'  # busybox has no bash applet


def _podman_works() -> bool:
    if shutil.which("podman") is None:
        return False
    return subprocess.run(["podman", "info"], capture_output=True).returncode == 0


@pytest.fixture(scope="session")
def podman() -> None:
    if _podman_works():
        return
    if os.environ.get("CI") == "true":
        pytest.fail("podman does not work here (CI): run `bash scripts/podman.sh install`")
    pytest.skip("podman is not installed (bash scripts/podman.sh install)")


def _add(tar: tarfile.TarFile, name: str, data: bytes | None = None, mode: int = 0o755) -> None:
    info = tarfile.TarInfo(name)
    info.mode = mode
    if data is None:
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
    else:
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


def make_image(
    files: dict[str, bytes], *, shell: bool = True, links: dict[str, str] | None = None
) -> str:
    """A busybox image with ``files`` in it (and /bin/bash unless ``shell`` is False); ``links``
    are symlinks made instead of the folders of the same name."""
    links = links or {}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for folder in ("bin", "etc", "proc", "sys", "dev", "tmp", "usr"):
            if folder not in links:
                _add(tar, folder, mode=0o1777 if folder == "tmp" else 0o755)
        for name, target in links.items():
            link = tarfile.TarInfo(name)
            link.type, link.linkname = tarfile.SYMTYPE, target
            tar.addfile(link)
        if shell:
            _add(tar, "bin/busybox", Path("/bin/busybox").read_bytes())
            link = tarfile.TarInfo("bin/sh")
            link.type, link.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(link)
            _add(tar, "bin/bash", BASH_SHIM)
        for name, data in files.items():
            _add(tar, name, data, mode=0o644)
    data = buf.getvalue()
    ref = f"localhost/sf-test:{hashlib.sha256(data).hexdigest()[:12]}"
    if subprocess.run(["podman", "image", "exists", ref]).returncode != 0:
        subprocess.run(["podman", "import", "-", ref], input=data, check=True, capture_output=True)
    return ref


def _blob(root: Path, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    path = StorageLayout(root).blob(digest)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return digest


def make_run(
    tmp_path: Path, script: str, *, image: str, containers: str = "podman", **env: str
) -> Path:
    """A custom/custom run (state/run.json, blobs, a binding) with ``image``; the binding's path.

    No server (an empty endpoint turns reports off): the runner leaves its log and exit
    record, which is what the control plane reads."""
    storage = tmp_path / "storage"
    data = script.encode()
    manifest = Manifest(
        files=[
            FileEntry(
                path="experiments/c1/train.sh", sha256=_blob(storage, data), size=len(data),
                executable=True,
            )
        ]
    )  # fmt: skip
    spec = JobSpec(
        project="lab",
        experiment="c1",
        method=get_method("custom/custom").ref(),
        profiles=["h200:1"],
        provenance=Provenance(git_commit="a" * 40, client_version="0.1.0"),
    )
    run_id = "r-" + hashlib.sha256(str(tmp_path).encode()).hexdigest()[:10]
    layout = StorageLayout(storage).run("u", "lab", "c1", run_id)
    layout.state.mkdir(parents=True)
    layout.run_json.write_text(
        json.dumps({"spec": spec.model_dump(mode="json"), "manifest": manifest.model_dump()})
    )
    binding = Binding(
        run_id=run_id,
        attempt=1,
        user="u",
        storage_root=str(storage),
        run_dir=str(layout.dir),
        work_dir=str(layout.work),
        out_dir=str(layout.out),
        log_path=str(layout.log(1)),
        image=image,
        containers=containers,
        extra_env=env,
    )
    path = layout.binding(1, 0)
    path.write_text(binding.model_dump_json())
    return path


def containers_named(name: str) -> list[str]:
    out = subprocess.run(
        ["podman", "ps", "-a", "--filter", f"name=^{name}$", "--format", "{{.Names}}"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return out.stdout.split()
