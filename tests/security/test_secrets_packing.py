"""Secrets through `sf submit`: what a careless lab holds is refused before anything leaves.

Each test builds a real lab in a real git repo and runs the real `sf` in-process. A refusal is
exit 2 with the file named; no server is started and no blob is written (the pack is refused
before the CLI connects).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from starforge.project.lab import Lab
from tests.conftest import Result, commit_all, git

PEM = b"-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmU=\n"
SUBMIT = (
    "submit",
    "c1",
    "--profile",
    "h200:1",
    "--image",
    "registry.example/train:v1",
    "--observability-url",
    "https://wandb.example/team/lab",
)


def refused(result: Result, sf_home: Path, *names: str) -> None:
    assert result.code == 2, result.err
    for name in names:
        assert name in result.err
    assert not list(sf_home.rglob("sha256")), "a blob was written"


@pytest.fixture
def lab(new_lab: Callable[..., Lab]) -> Lab:
    return new_lab(experiments_={"c1": "custom/custom"})


def test_a_committed_symlink_to_a_key_outside_the_lab_is_refused(
    lab: Lab, sf: Callable[..., Result], sf_home: Path, tmp_path: Path
) -> None:
    key = tmp_path / "home" / ".ssh" / "id_rsa"
    key.parent.mkdir(parents=True)
    key.write_bytes(PEM)
    (lab.root / "common" / "notes.txt").symlink_to(key)
    commit_all(lab.root)
    result = sf(*SUBMIT, cwd=lab.root)
    refused(result, sf_home, "common/notes.txt", "out of the lab")
    assert "BEGIN OPENSSH" not in result.err + result.out


def test_an_untracked_key_under_a_harmless_name_is_refused_not_warned(
    lab: Lab, sf: Callable[..., Result], sf_home: Path
) -> None:
    (lab.root / "experiments" / "c1" / "notes.txt").write_bytes(PEM)
    result = sf(*SUBMIT, cwd=lab.root)
    refused(result, sf_home, "experiments/c1/notes.txt", "private key")


@pytest.mark.parametrize(
    "path",
    [
        "common/.ssh/id_ed25519",
        "common/id_rsa",
        "common/.aws/credentials",
        "common/service-account.json",
        "common/kubeconfig",
        "common/.kube/config",
        "common/.docker/config.json",
        "common/.netrc",
        "common/.pgpass",
        "common/server.pem",
        "common/tls.key",
        "common/cert.p12",
        "common/.env",
        "experiments/c1/.env.production",
        "configs/secrets/db.yaml",
        "common/credentials-prod.json",
        "common/hf_token.txt",
    ],
)
def test_each_well_known_credential_path_is_refused_even_when_committed(
    lab: Lab, sf: Callable[..., Result], sf_home: Path, path: str
) -> None:
    (lab.root / path).parent.mkdir(parents=True, exist_ok=True)
    (lab.root / path).write_text("harmless-looking\n")
    git(lab.root, "add", "-f", path)
    git(lab.root, "commit", "-q", "-m", "oops")
    refused(sf(*SUBMIT, cwd=lab.root), sf_home, path)


@pytest.mark.parametrize(
    "content",
    [
        b"HF_TOKEN=hf_" + b"aBcDeFgHiJ" * 4 + b"\n",
        b"export GH=ghp_" + b"Z" * 36 + b"\n",
        b"key: AKIAIOSFODNN7EXAMPLE\n",
        b"OPENAI_API_KEY=sk-" + b"q" * 48 + b"\n",
    ],
)
def test_a_token_in_an_ordinary_file_is_caught_by_its_content(
    lab: Lab, sf: Callable[..., Result], sf_home: Path, content: bytes
) -> None:
    (lab.root / "common" / "settings.sh").write_bytes(b"# run settings\n" + content)
    commit_all(lab.root)
    refused(sf(*SUBMIT, cwd=lab.root), sf_home, "common/settings.sh", "content:")


def test_a_symlink_to_a_directory_is_a_clear_refusal_not_a_crash(
    lab: Lab, sf: Callable[..., Result], sf_home: Path, tmp_path: Path
) -> None:
    (tmp_path / "datasets").mkdir()
    (tmp_path / "datasets" / "train.jsonl").write_text("{}\n")
    (lab.root / "common" / "data").symlink_to(tmp_path / "datasets")
    (lab.root / "common" / "inside").symlink_to(lab.root / "experiments")
    commit_all(lab.root)
    result = sf(*SUBMIT, cwd=lab.root)
    refused(result, sf_home, "common/data", "common/inside")
    assert "Traceback" not in result.err and "IsADirectoryError" not in result.err
