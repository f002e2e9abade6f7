"""The node's dataset cache: fetched once for runs that start together, verified, refetched
when an entry on disk is damaged, and handed to the job as paths and ``<NAME>_DATA_DIR``."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
from pathlib import Path

import pytest

from starforge.contract.datasets import Resolved, manifest_bytes
from starforge.contract.errors import RunnerError
from starforge.contract.jobspec import FileEntry, InputKind, InputRef
from starforge.contract.layout import StorageLayout
from starforge.runner import datasets

FILES = {"train.jsonl": b'{"prompt": "a"}\n' * 100, "sub/val.jsonl": b'{"prompt": "b"}\n'}


def _blob(root: Path, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    path = StorageLayout(root).blob(digest)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return digest


def stored(
    root: Path, files: dict[str, bytes] = FILES, name: str = "gsm8k-zh", version: str = "v2"
) -> Resolved:
    """A dataset version in the blob store, as admission records it for a run."""
    entries = [FileEntry(path=p, sha256=_blob(root, d), size=len(d)) for p, d in files.items()]
    digest = _blob(root, manifest_bytes(entries))
    return Resolved(
        owner="alice", name=name, version=version, path="train.jsonl", manifest_sha256=digest
    )


def _fetch_in_child(args: tuple[str, dict[str, str]]) -> bool:
    root, resolved = args
    return datasets.ensure(Path(root), Resolved.model_validate(resolved))[1]


def test_two_runs_starting_together_fetch_the_dataset_once(tmp_path: Path) -> None:
    r = stored(tmp_path)
    job = (str(tmp_path), r.model_dump())
    with multiprocessing.get_context("fork").Pool(2) as pool:
        fetched = pool.map(_fetch_in_child, [job, job])
    assert sorted(fetched) == [False, True]  # one fetch; the other waited and reused it
    folder = datasets.cache_dir(tmp_path, r)
    assert folder == tmp_path / "cache" / "datasets" / "alice" / "gsm8k-zh" / "v2"
    assert {p: (folder / p).read_bytes() for p in FILES} == FILES
    names = sorted(p.name for p in folder.parent.iterdir())
    assert names == ["v2", "v2.lock", "v2.use"]  # no staging folder left behind
    assert datasets.ensure(tmp_path, r) == (folder, False)


def test_a_cache_entry_damaged_on_disk_is_fetched_again(tmp_path: Path) -> None:
    r = stored(tmp_path)
    folder, fetched = datasets.ensure(tmp_path, r)
    assert fetched
    victim = folder / "train.jsonl"
    stat = victim.stat()
    victim.write_bytes(b"X" * stat.st_size)  # same size, other bytes
    os.utime(victim, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert datasets.ensure(tmp_path, r) == (folder, True)
    assert victim.read_bytes() == FILES["train.jsonl"]
    (folder / "sub" / "val.jsonl").unlink()  # a partial entry
    assert datasets.ensure(tmp_path, r) == (folder, True)
    (folder / ".starforge-dataset.json").unlink()  # no marker: never trusted
    assert datasets.ensure(tmp_path, r) == (folder, True)
    assert datasets.ensure(tmp_path, r) == (folder, False)


def test_a_corrupt_blob_fails_the_fetch_and_leaves_no_entry(tmp_path: Path) -> None:
    r = stored(tmp_path)
    digest = hashlib.sha256(FILES["train.jsonl"]).hexdigest()
    StorageLayout(tmp_path).blob(digest).write_bytes(b"rotten\n")
    with pytest.raises(RunnerError, match="corrupt"):
        datasets.ensure(tmp_path, r)
    assert not datasets.cache_dir(tmp_path, r).exists()
    names = sorted(p.name for p in datasets.cache_dir(tmp_path, r).parent.iterdir())
    assert names == ["v2.lock", "v2.use"]


def test_the_job_gets_paths_inside_the_cache_and_its_data_dir_variable(tmp_path: Path) -> None:
    r = stored(tmp_path)
    val = r.model_copy(update={"path": "sub/val.jsonl"})
    given = InputRef(kind=InputKind.DATASET, value="train.jsonl", dataset="alice/gsm8k-zh")
    refs, env, said = datasets.prepare(
        tmp_path, {"train_data": r, "validation_data": val}, {"train_data": given}
    )
    folder = datasets.cache_dir(tmp_path, r)
    assert refs == {"train_data": InputRef(kind=InputKind.SHARED, value=f"{folder}/train.jsonl")}
    assert env == {"GSM8K_ZH_DATA_DIR": str(folder)}
    assert said[0].startswith("fetched dataset alice/gsm8k-zh@v2")
    assert said[1].startswith("reused the cached dataset alice/gsm8k-zh@v2")


def test_a_recorded_path_outside_the_dataset_is_refused(tmp_path: Path) -> None:
    r = stored(tmp_path).model_copy(update={"path": "../../../../etc/passwd"})
    given = InputRef(kind=InputKind.DATASET, value="x", dataset="alice/gsm8k-zh")
    with pytest.raises(ValueError, match="normalised relative path"):
        datasets.prepare(tmp_path, {"train_data": r}, {"train_data": given})


def test_the_least_recently_used_versions_nobody_uses_are_evicted_to_fit_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old, mid, new = (
        stored(tmp_path, {"train.jsonl": bytes([i]) * 1000}, version=v)
        for i, v in enumerate(("v1", "v2", "v3"))
    )
    first, _ = datasets.ensure(tmp_path, old)
    second, _ = datasets.ensure(tmp_path, mid)
    in_use = datasets.hold(first)  # a running run reads v1, the least recently used
    third, _ = datasets.ensure(tmp_path, new)
    assert datasets.evict(tmp_path, 2000, keep={third}) == [second]
    assert first.is_dir() and third.is_dir() and not second.exists()
    in_use.close()  # that run ended
    assert datasets.evict(tmp_path, 1000, keep={third}) == [first]

    monkeypatch.setenv(datasets.LIMIT_ENV, "1000")  # the runner's own path: fetch, then evict
    given = InputRef(kind=InputKind.DATASET, value="train.jsonl", dataset="alice/gsm8k-zh@v1")
    _, _, said = datasets.prepare(tmp_path, {"train_data": old}, {"train_data": given})
    assert said[-1].startswith(f"evicted the unused cached dataset {third}")
    assert first.is_dir() and not third.exists()
