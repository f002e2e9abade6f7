"""Links inside a package: packed as links, recreated by the runner, never pointing out of it."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from starforge.contract.errors import RunnerError
from starforge.contract.jobspec import FileEntry, Manifest
from starforge.contract.layout import StorageLayout
from starforge.project.packer import build_manifest
from starforge.runner.unpack import unpack


def store(storage: Path, lab: Path, manifest: Manifest) -> None:
    """Upload as the CLI does: each digest's bytes, read through the lab (links followed)."""
    for entry in manifest.files:
        path = StorageLayout(storage).blob(entry.sha256)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes((lab / entry.path).read_bytes())


def test_a_link_inside_the_lab_travels_as_a_link_and_the_runner_recreates_it(
    tmp_path: Path,
) -> None:
    lab, storage, work = tmp_path / "lab", tmp_path / "storage", tmp_path / "work"
    (lab / "common").mkdir(parents=True)
    (lab / "experiments" / "c1").mkdir(parents=True)
    (lab / "common" / "util.py").write_text("X = 1\n")
    (lab / "experiments" / "c1" / "util.py").symlink_to("../../common/util.py")
    manifest = build_manifest(lab, ["common/util.py", "experiments/c1/util.py"])
    store(storage, lab, manifest)
    assert unpack(manifest, storage, work) == 2
    link = work / "experiments" / "c1" / "util.py"
    assert link.is_symlink() and os.readlink(link) == "../../common/util.py"
    assert link.read_text() == "X = 1\n"


def test_the_runner_refuses_a_link_to_a_file_the_package_lacks(tmp_path: Path) -> None:
    storage, work = tmp_path / "storage", tmp_path / "work"
    data = b"secret-shaped bytes the attacker guessed\n"
    digest = hashlib.sha256(data).hexdigest()
    # A hostile manifest: the link's target is inside the work dir lexically but is not a file
    # of the package (it would be whatever the job or another attempt left there).
    manifest = Manifest(
        files=[FileEntry(path="common/a.txt", sha256=digest, size=len(data), symlink="b.txt")]
    )
    with pytest.raises(RunnerError, match="not a file of the package"):
        unpack(manifest, storage, work)
    assert not work.exists()
