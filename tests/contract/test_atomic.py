"""The one atomic writer: readers see the old file or the whole new one, never a part."""

from __future__ import annotations

import errno
import json
import os
import stat
import threading
from pathlib import Path

import pytest

from starforge.contract.atomic import write_bytes_atomic, write_json_atomic


def test_json_is_replaced_whole_with_no_temp_files_left(tmp_path: Path) -> None:
    path = tmp_path / "state" / "x.json"
    write_json_atomic(path, {"v": 1})
    write_json_atomic(path, {"v": 2})
    assert json.loads(path.read_text()) == {"v": 2}
    assert [p.name for p in path.parent.iterdir()] == ["x.json"]


def test_a_secret_file_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "binding.json"
    write_json_atomic(path, {"run_token": "secret"}, mode=0o600)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_each_write_uses_its_own_temp_name_in_the_target_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    renamed: list[tuple[str, str]] = []
    real_replace = os.replace

    def recording_replace(src: str, dst: str) -> None:
        renamed.append((str(src), str(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", recording_replace)
    path = tmp_path / "x.json"
    write_bytes_atomic(path, b"1")
    write_bytes_atomic(path, b"2")
    temps = [Path(src) for src, _ in renamed]
    assert len(set(temps)) == 2
    assert all(t.parent == tmp_path and t.name.startswith(".x.json.") for t in temps)


def test_concurrent_writers_of_one_file_never_break_each_other(tmp_path: Path) -> None:
    path = tmp_path / "record.json"
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for i in range(30):
                write_json_atomic(path, {"writer": n, "i": i})
        except BaseException as exc:  # a shared temp name fails here (it was renamed away)
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert json.loads(path.read_text())["i"] == 29
    assert [p.name for p in tmp_path.iterdir()] == ["record.json"]


def test_a_failed_write_leaves_the_old_file_and_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "x.json"
    write_json_atomic(path, {"v": 1})

    def disk_full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space"):
        write_json_atomic(path, {"v": 2})
    assert json.loads(path.read_text()) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]


def test_a_file_that_can_be_made_again_is_replaced_whole_without_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "cache.json"
    write_json_atomic(path, {"v": 1}, durable=False)

    def no_fsync(fd: int) -> None:
        raise AssertionError("a file that can be made again is not fsynced")

    monkeypatch.setattr(os, "fsync", no_fsync)
    write_json_atomic(path, {"v": 2}, mode=0o600, durable=False)
    assert json.loads(path.read_text()) == {"v": 2}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["cache.json"]


def test_a_create_only_write_never_overwrites_a_file_another_writer_made(tmp_path: Path) -> None:
    path = tmp_path / "exit.json"
    write_json_atomic(path, {"by": "runner"})
    with pytest.raises(FileExistsError):
        write_json_atomic(path, {"by": "server"}, replace=False)
    assert json.loads(path.read_text()) == {"by": "runner"}
    assert [p.name for p in tmp_path.iterdir()] == ["exit.json"]
    fresh = tmp_path / "fresh.json"
    write_json_atomic(fresh, {"by": "server"}, mode=0o600, replace=False)
    assert json.loads(fresh.read_text()) == {"by": "server"}
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exit.json", "fresh.json"]
