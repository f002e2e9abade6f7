"""The packer's hash cache: unchanged files are not read again, and a digest is never stale."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from starforge.contract.errors import StarForgeError
from starforge.project.hashcache import HashCache
from starforge.project.packer import build_manifest

HOUR_NS = 3600 * 10**9


def _age(path: Path, by_ns: int = HOUR_NS) -> None:
    """Set mtime in the past (ctime stays now: tests use a small granule for that)."""
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - by_ns))


def _pack(lab: Path, cache_dir: Path, granule_ns: int, *paths: str) -> tuple[dict, HashCache]:
    cache = HashCache(lab, cache_dir, granule_ns=granule_ns)
    manifest = build_manifest(lab, list(paths), cache)
    return {f.path: f.sha256 for f in manifest.files}, cache


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def lab(tmp_path: Path) -> Path:
    root = tmp_path / "lab"
    root.mkdir()
    (root / "big.bin").write_bytes(b"a" * 4096)
    (root / "train.py").write_text("print('hi')\n")
    return root


def test_an_unchanged_file_is_not_read_again(lab: Path, tmp_path: Path) -> None:
    _age(lab / "big.bin")
    _age(lab / "train.py")
    first, cache = _pack(lab, tmp_path / "c", 1, "big.bin", "train.py")
    assert cache.stats.hashed == 2 and cache.stats.hits == 0
    again, cache = _pack(lab, tmp_path / "c", 1, "big.bin", "train.py")
    assert again == first
    assert cache.stats.hashed == 0 and cache.stats.hits == 2


def test_a_touched_file_is_read_again(lab: Path, tmp_path: Path) -> None:
    _age(lab / "big.bin")
    _pack(lab, tmp_path / "c", 1, "big.bin")
    os.utime(lab / "big.bin")  # `touch`: same content, new mtime
    digests, cache = _pack(lab, tmp_path / "c", 1, "big.bin")
    assert cache.stats.hashed == 1
    assert digests["big.bin"] == _sha(b"a" * 4096)


def test_same_size_same_mtime_rewrite_is_rehashed(lab: Path, tmp_path: Path) -> None:
    path = lab / "big.bin"
    before = path.stat()
    _pack(lab, tmp_path / "c", HOUR_NS, "big.bin")
    # Another change of the same size, with the mtime put back: only ctime and the
    # granule rule tell it apart, and the file was too recent to be trusted anyway.
    path.write_bytes(b"b" * 4096)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    digests, cache = _pack(lab, tmp_path / "c", HOUR_NS, "big.bin")
    assert digests["big.bin"] == _sha(b"b" * 4096)
    assert cache.stats.hashed == 1 and cache.stats.hits == 0


def test_a_racily_clean_file_is_hashed_every_time_until_it_is_old_enough(
    lab: Path, tmp_path: Path
) -> None:
    for _ in range(2):
        _, cache = _pack(lab, tmp_path / "c", HOUR_NS, "train.py")
        assert cache.stats.hashed == 1 and cache.stats.hits == 0


def test_a_new_rules_fingerprint_rechecks_every_file(lab: Path, tmp_path: Path) -> None:
    _age(lab / "train.py")
    _pack(lab, tmp_path / "c", 1, "train.py")
    cache = HashCache(lab, tmp_path / "c", granule_ns=1)
    cache.path.write_text(cache.path.read_text().replace(cache.rules, "older-rules"))
    _, cache = _pack(lab, tmp_path / "c", 1, "train.py")
    assert cache.stats.hashed == 1


def test_a_cached_file_that_becomes_sensitive_is_still_refused(lab: Path, tmp_path: Path) -> None:
    _age(lab / "train.py")
    _pack(lab, tmp_path / "c", 1, "train.py")
    (lab / "train.py").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n")
    with pytest.raises(StarForgeError):
        _pack(lab, tmp_path / "c", 1, "train.py")


def test_a_corrupt_cache_file_is_ignored(lab: Path, tmp_path: Path) -> None:
    cache = HashCache(lab, tmp_path / "c")
    cache.path.parent.mkdir(parents=True)
    cache.path.write_text("{not json")
    digests, _ = _pack(lab, tmp_path / "c", 1, "train.py")
    assert digests["train.py"] == _sha(b"print('hi')\n")


def test_a_damaged_cache_entry_is_read_again_not_trusted(lab: Path, tmp_path: Path) -> None:
    _age(lab / "train.py")
    _, cache = _pack(lab, tmp_path / "c", 1, "train.py")
    entry = cache.entries["train.py"]
    assert isinstance(entry, list)
    cache.entries["train.py"] = [entry[0], "not-a-digest"]
    cache._dirty = True
    cache.save()
    digests, cache = _pack(lab, tmp_path / "c", 1, "train.py")
    assert digests["train.py"] == _sha(b"print('hi')\n")
    assert cache.stats.hits == 0 and cache.stats.hashed == 1


def test_a_manifest_from_the_cache_is_byte_for_byte_the_one_from_reading(
    lab: Path, tmp_path: Path
) -> None:
    (lab / "run.sh").write_text("#!/bin/sh\n")
    (lab / "run.sh").chmod(0o755)
    (lab / "link.py").symlink_to("train.py")
    files = ["big.bin", "train.py", "run.sh", "link.py"]
    for name in ("big.bin", "train.py", "run.sh"):
        _age(lab / name)
    read = HashCache(lab, tmp_path / "c", granule_ns=1)
    first = build_manifest(lab, files, read).model_dump_json()
    cached = HashCache(lab, tmp_path / "c", granule_ns=1)
    again = build_manifest(lab, files, cached).model_dump_json()
    assert cached.stats.hits == 3
    assert again == first
    assert '"symlink":"train.py"' in first and '"executable":true' in first
