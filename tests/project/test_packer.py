from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from starforge.contract.errors import InputNotFound, SensitiveFiles, UsageError
from starforge.contract.jobspec import InputKind
from starforge.contract.packaging import is_sensitive
from starforge.project.packer import build_manifest, resolve_input


@pytest.mark.parametrize(
    "name",
    [
        ".env",
        ".env.local",
        "key.pem",
        "server.key",
        "id_rsa",
        "id_rsa.pub",
        "id_ed25519",
        ".netrc",
        "credentials.json",
        "hf_token.txt",
        "my_token_v2.txt",
        "gcp_credentials.json",
        "secrets.yaml",
        "deploy.secret",
        "CERT.PEM",
        "sub/dir/.env",
    ],
)
def test_secret_looking_names_are_sensitive(name: str) -> None:
    assert is_sensitive(name)


@pytest.mark.parametrize(
    "name",
    [
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "train.py",
        "environment.yaml",
        "keys.py",
        "tokens.jsonl",
    ],
)
def test_ordinary_files_are_not_sensitive(name: str) -> None:
    assert not is_sensitive(name)


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
