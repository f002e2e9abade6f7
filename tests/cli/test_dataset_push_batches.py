"""``sf dataset push`` uploads a folder of many small files the way ``sf submit`` uploads a
package: many files to a request, not one request per file.

The pushes talk to the app in process (FastAPI's TestClient as the client's transport: no
sockets); every request the client sends is counted on the way out.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import httpx

from starforge.cli.cmd_dataset import push_folder
from starforge.client import datasets as api
from starforge.client.http import Client
from starforge.contract.datasets import DatasetRef
from starforge.project import packer
from starforge.server.runtime import Runtime
from tests.cli.test_dataset_commands import alice  # noqa: F401  (the fixture)

FILES = 3000  # more than one batch holds (uploads.BATCH_FILES)


def small_files(root: Path, count: int) -> Path:
    root.mkdir(parents=True)
    for i in range(count):
        (root / f"shard-{i // 1000}" / f"f{i:05d}.jsonl").parent.mkdir(exist_ok=True)
        (root / f"shard-{i // 1000}" / f"f{i:05d}.jsonl").write_text(f'{{"i": {i}}}\n')
    return root


def count_requests(client: Client) -> Counter[str]:
    seen: Counter[str] = Counter()

    def note(request: httpx.Request) -> None:
        path = request.url.path.split("/api/v1", 1)[-1]
        seen[f"{request.method} {'/blobs/<sha256>' if request.method == 'PUT' else path}"] += 1

    client._http.event_hooks["request"].append(note)
    return seen


def test_many_small_files_go_up_in_a_few_batches_and_the_version_holds_their_bytes(
    alice: Client,  # noqa: F811
    tmp_path: Path,
) -> None:
    data = small_files(tmp_path / "many", FILES)
    sent = count_requests(alice)
    progressed: list[int] = []
    started: list[tuple[int, int]] = []

    pushed = push_folder(
        alice, "many", "v1", data, on_start=lambda n, b: started.append((n, b)),
        on_progress=progressed.append,
    )  # fmt: skip

    total = sum(p.stat().st_size for p in data.rglob("*") if p.is_file())
    assert (pushed.created, pushed.files, pushed.files_uploaded) == (True, FILES, FILES)
    assert started == [(FILES, total)] and sum(progressed) == total  # the bar reaches its end
    assert sent["PUT /blobs/<sha256>"] == 0
    assert 2 <= sent["POST /blobs/batch"] <= 3
    view = api.show(alice, DatasetRef(owner="alice", name="many", version="v1"))
    paths = sorted(p.relative_to(data).as_posix() for p in data.rglob("*") if p.is_file())
    local = packer.build_manifest(data, paths)
    assert [(f.path, f.size, f.sha256) for f in view.files] == [
        (f.path, f.size, f.sha256) for f in local.files
    ]
    rt: Runtime = alice._http.app.state.runtime  # type: ignore[attr-defined]
    for entry in view.files[:: FILES // 50]:  # the stored bytes are the files' own
        with rt.storage.open_blob(entry.sha256) as blob:
            assert blob.read() == (data / entry.path).read_bytes()
