from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from starforge.contract import blobbatch
from starforge.contract.errors import InputNotFound, SensitiveFiles, UsageError
from starforge.contract.jobspec import InputKind
from starforge.contract.sensitive import HEAD_BYTES
from starforge.project.packer import _hash, build_manifest, resolve_input


def test_a_manifest_names_every_file_by_its_sha256(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("hello")
    (tmp_path / "run.sh").write_text("echo")
    (tmp_path / "run.sh").chmod(0o755)
    manifest = build_manifest(tmp_path, ["run.sh", "a.txt", "a.txt"])
    assert [f.path for f in manifest.files] == ["a.txt", "run.sh"]
    assert manifest.files[0].sha256 == hashlib.sha256(b"hello").hexdigest()
    assert manifest.files[1].executable and not manifest.files[0].executable


def test_a_secret_refuses_the_whole_package_and_names_every_offender(tmp_path: Path) -> None:
    for name in ("ok.py", ".env", "id_rsa"):
        (tmp_path / name).write_text("x")
    with pytest.raises(SensitiveFiles) as err:
        build_manifest(tmp_path, ["ok.py", ".env", "id_rsa"])
    assert err.value.details["files"] == [".env", "id_rsa"]
    assert "--allow-dirty does not lift" in (err.value.hint or "")


PEM = b"-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\n-----END RSA PRIVATE KEY-----\n"


def test_a_key_under_a_harmless_name_is_refused_by_its_content(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_bytes(PEM)
    (tmp_path / "train.py").write_text("print('hi')\n")
    with pytest.raises(SensitiveFiles) as err:
        build_manifest(tmp_path, ["notes.txt", "train.py"])
    assert err.value.details["files"] == ["notes.txt"]
    assert "private key" in err.value.message
    assert "do not rename" in (err.value.hint or "")


def test_every_offender_is_named_with_its_reason_in_one_refusal(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    lab = tmp_path / "lab"
    (lab / "common").mkdir(parents=True)
    outside.mkdir()
    (outside / "id").write_bytes(PEM)
    (lab / "common" / ".env").write_text("A=1\n")
    (lab / "common" / "key.txt").write_text("HF=hf_" + "abcdefghij" * 4 + "\n")
    (lab / "common" / "notes.txt").symlink_to(outside / "id")
    with pytest.raises(SensitiveFiles) as err:
        build_manifest(lab, ["common/.env", "common/key.txt", "common/notes.txt"])
    reasons = err.value.details["reasons"]
    assert sorted(reasons) == ["common/.env", "common/key.txt", "common/notes.txt"]
    assert "Hugging Face token" in reasons["common/key.txt"]
    assert "out of the lab" in reasons["common/notes.txt"]
    assert "replace a link" in (err.value.hint or "")


def test_a_link_to_a_packed_file_travels_as_a_relative_link(tmp_path: Path) -> None:
    (tmp_path / "common").mkdir()
    (tmp_path / "exp").mkdir()
    (tmp_path / "common" / "util.py").write_text("X = 1\n")
    (tmp_path / "exp" / "util.py").symlink_to(tmp_path / "common" / "util.py")  # absolute link
    manifest = build_manifest(tmp_path, ["common/util.py", "exp/util.py"])
    link = manifest.files[1]
    assert (link.path, link.symlink, link.link_target) == (
        "exp/util.py",
        "../common/util.py",
        "common/util.py",
    )
    assert link.sha256 == manifest.files[0].sha256 == hashlib.sha256(b"X = 1\n").hexdigest()


def test_a_link_to_a_lab_file_that_does_not_travel_is_refused(tmp_path: Path) -> None:
    (tmp_path / "other.py").write_text("X = 1\n")
    (tmp_path / "a.py").symlink_to("other.py")
    with pytest.raises(SensitiveFiles, match="not in the package"):
        build_manifest(tmp_path, ["a.py"])


def test_a_link_to_a_folder_is_refused_with_a_clear_reason(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.jsonl").write_text("{}\n")
    (tmp_path / "common").mkdir()
    (tmp_path / "common" / "data").symlink_to(tmp_path / "data")
    with pytest.raises(SensitiveFiles) as err:
        build_manifest(tmp_path, ["common/data", "data/x.jsonl"])
    assert "symlink to the folder data/" in err.value.details["reasons"]["common/data"]


def test_a_dangling_link_is_refused_not_a_crash(tmp_path: Path) -> None:
    (tmp_path / "gone.py").symlink_to(tmp_path / "missing.py")
    with pytest.raises(SensitiveFiles, match=r"gone\.py"):
        build_manifest(tmp_path, ["gone.py"])


def test_a_relative_model_folder_travels_as_package_files(tmp_path: Path) -> None:
    (tmp_path / "models" / "tiny").mkdir(parents=True)
    (tmp_path / "models" / "tiny" / "config.json").write_text("{}")
    (tmp_path / "models" / "tiny" / "tokenizer.json").write_text("{}")
    got = resolve_input(tmp_path, "--model", "models/tiny", hub_ok=True)
    assert got.ref.kind is InputKind.PACKAGE
    assert got.files == ["models/tiny/config.json", "models/tiny/tokenizer.json"]


def test_a_hub_id_is_kept_as_a_hub_reference(tmp_path: Path) -> None:
    got = resolve_input(tmp_path, "--model", "Qwen/Qwen3.5-9B", hub_ok=True)
    assert (got.ref.kind, got.ref.value, got.files) == (InputKind.HUB, "Qwen/Qwen3.5-9B", [])


def test_an_absolute_path_is_used_in_place_on_shared_storage(tmp_path: Path) -> None:
    got = resolve_input(tmp_path, "--train-data", "/shared/data/train.jsonl", hub_ok=False)
    assert got.ref.kind is InputKind.SHARED


def test_a_mistyped_path_under_an_existing_folder_is_not_taken_for_a_hub_id(
    tmp_path: Path,
) -> None:
    (tmp_path / "models").mkdir()
    with pytest.raises(InputNotFound, match="--model models/tinyy"):
        resolve_input(tmp_path, "--model", "models/tinyy", hub_ok=True)


def test_missing_data_file_names_the_flag_and_where_it_looked(tmp_path: Path) -> None:
    with pytest.raises(InputNotFound) as err:
        resolve_input(tmp_path, "--train-data", "data/train.jsonl", hub_ok=False)
    assert "--train-data data/train.jsonl" in err.value.message
    assert str(tmp_path) in err.value.message


def test_a_relative_path_may_not_leave_the_lab(tmp_path: Path) -> None:
    lab = tmp_path / "lab"
    lab.mkdir()
    (tmp_path / "outside.jsonl").write_text("{}")
    with pytest.raises(UsageError, match="inside the lab"):
        resolve_input(lab, "--train-data", "../outside.jsonl", hub_ok=False)


def test_the_packer_keeps_what_it_read_of_small_files_for_the_upload(tmp_path: Path) -> None:
    small, big = b"small file\n", b"z" * (blobbatch.SMALL_BLOB_BYTES + 1)
    (tmp_path / "small.txt").write_bytes(small)
    (tmp_path / "big.bin").write_bytes(big)
    kept: dict[str, bytes] = {}
    build_manifest(tmp_path, ["small.txt", "big.bin"], keep=kept)
    assert kept == {hashlib.sha256(small).hexdigest(): small}  # a big file is streamed later


@pytest.mark.parametrize("hint", [0, 10, 4096, 1 << 30])
def test_a_file_is_hashed_to_its_end_whatever_size_its_stat_said(tmp_path: Path, hint: int) -> None:
    # The stat is taken before the read: a file that grew or shrank since is still read whole.
    data = os.urandom(3000) + b"x" * (HEAD_BYTES + 5000)
    path = tmp_path / "grown.bin"
    path.write_bytes(data)
    digest, size, head, _after, whole = _hash(str(path), hint, keep=True)
    assert digest == hashlib.sha256(data).hexdigest() and size == len(data)
    assert head == data[:HEAD_BYTES]
    assert whole == data


def test_a_key_past_a_short_first_read_is_still_in_the_checked_head(tmp_path: Path) -> None:
    data = b"." * 100 + b"-----BEGIN RSA PRIVATE KEY-----\n"
    path = tmp_path / "notes.txt"
    path.write_bytes(data)
    _digest, _size, head, _after, whole = _hash(str(path), 10)
    assert head == data and whole is None
