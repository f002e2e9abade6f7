"""``sf dataset push`` of a folder of many small files through the real server: every file is
in the version, with its own size and digest, and the server holds every blob."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from starforge.cli.connect import connect
from starforge.project import packer
from tests.conftest import Result

pytestmark = pytest.mark.integration
FILES = 3000  # more than one upload batch holds


def test_a_push_of_thousands_of_small_files_holds_each_file(
    sf: Callable[..., Result], tmp_path: Path
) -> None:
    data = tmp_path / "many"
    for i in range(FILES):
        path = data / f"part-{i % 7}" / f"row-{i:05d}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f'{{"prompt": "{tmp_path.name} {i}"}}\n')

    pushed = sf("dataset", "push", "many-small", "v1", str(data), "--json")
    assert pushed.code == 0, pushed.err
    body = pushed.json()
    assert isinstance(body, dict)
    assert (body["created"], body["files"], body["files_uploaded"]) == (True, FILES, FILES)

    shown = sf("dataset", "show", str(body["ref"]), "--json").json()
    assert isinstance(shown, dict) and shown["file_count"] == FILES
    paths = sorted(p.relative_to(data).as_posix() for p in data.rglob("*") if p.is_file())
    local = packer.build_manifest(data, paths).files
    assert [(f["path"], f["size"], f["sha256"]) for f in shown["files"]] == [
        (f.path, f.size, f.sha256) for f in local
    ]
    with connect(start=False) as client:
        assert client.missing_blobs([f.sha256 for f in local]) == []

    again = sf("dataset", "push", "many-small", "v1", str(data), "--json").json()
    assert isinstance(again, dict) and (again["created"], again["files_uploaded"]) == (False, 0)
