"""The sensitive-file policy: credential names, folders and content signatures, and nothing else."""

from __future__ import annotations

import pytest

from starforge.contract.errors import SensitiveFiles
from starforge.contract.jobspec import FileEntry, Manifest
from starforge.contract.sensitive import HEAD_BYTES, check_content, check_path, refuse_manifest

DIGEST = "ab" * 32


@pytest.mark.parametrize(
    "path",
    [
        ".env",
        ".env.local",
        "common/.env",
        "key.pem",
        "server.pem",
        "CERT.PEM",
        "server.key",
        "store.p12",
        "id_rsa",
        "id_rsa.pub",
        "id_ed25519",
        ".ssh/id_ecdsa",
        "home/.ssh/config",
        ".aws/credentials",
        "common/.aws/config",
        "service-account.json",
        "service_account-prod.json",
        "kubeconfig",
        ".kube/config",
        ".docker/config.json",
        ".netrc",
        ".pgpass",
        "credentials.json",
        "gcp_credentials.json",
        "hf_token.txt",
        "my_token_v2.txt",
        "secrets/token.txt",
        "configs/secrets/db.yaml",
        "secrets.yaml",
        "deploy.secret",
        "terraform.tfstate",
    ],
)
def test_credential_paths_are_sensitive(path: str) -> None:
    assert check_path(path) is not None


@pytest.mark.parametrize(
    "path",
    [
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "train.py",
        "environment.yaml",
        "keys.py",
        "tokens.jsonl",
        "experiments/e1/config.yaml",
        "common/secret_sauce.md",
        "docs/keyboard.txt",
    ],
)
def test_ordinary_paths_are_not_sensitive(path: str) -> None:
    assert check_path(path) is None


def test_a_finding_says_why_in_words() -> None:
    found = check_path("project/.kube/config")
    assert found is not None and ".kube/" in found.reason


PEM = (
    b"-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n"
    b"-----END OPENSSH PRIVATE KEY-----\n"
)


@pytest.mark.parametrize(
    ("content", "rule"),
    [
        (PEM, "content.private_key"),
        (b"-----BEGIN RSA PRIVATE KEY-----\nMIIE", "content.private_key"),
        (b"-----BEGIN ENCRYPTED PRIVATE KEY-----", "content.private_key"),
        (b"-----BEGIN PGP PRIVATE KEY BLOCK-----", "content.private_key"),
        (b'{"type": "service_account", "project_id": "p"}', "content.service_account"),
        (b"token = hf_" + b"a1B2c3D4e5" * 4, "content.hf_token"),
        (b"GITHUB_TOKEN=ghp_" + b"A" * 36, "content.github_token"),
        (b"github_pat_" + b"11ABCDEFG0" * 6, "content.github_token"),
        (b"OPENAI_API_KEY=sk-proj-" + b"x1Y2z3" * 8, "content.openai_key"),
        (b"aws_access_key_id = AKIAIOSFODNN7EXAMPLE\n", "content.aws_key"),
        (
            b"aws_secret_access_key = " + b"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "content.aws_secret",
        ),
        (b"SLACK=xoxb-1234567890-abcdefghij", "content.slack_token"),
        (b"WANDB_API_KEY=" + b"0123456789abcdef" * 2 + b"01234567", "content.wandb_key"),
    ],
)
def test_credential_contents_are_caught_by_their_signature(content: bytes, rule: str) -> None:
    found = check_content(b"some notes\n" + content + b"\nmore\n")
    assert found is not None and found.rule == rule


@pytest.mark.parametrize(
    "content",
    [
        b"import os\ntoken = os.environ['HF_TOKEN']\n",
        b'{"bos_token": "<s>", "eos_token": "</s>", "pad_token_id": 0}',
        b"the task-specific scikit-learn pipeline uses a risk-free rate\n",
        b"sha = '" + b"0123456789abcdef" * 2 + b"01234567'\n",  # 40 hex, not labelled as W&B
        b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
        b"\x00\x01\x02binary\xff\xfe" * 1000,
    ],
)
def test_ordinary_contents_are_not_flagged(content: bytes) -> None:
    assert check_content(content) is None


def test_the_content_check_reads_only_the_head_of_a_file() -> None:
    assert check_content(b"x" * HEAD_BYTES + PEM) is None
    assert check_content(b"x" * (HEAD_BYTES - len(PEM)) + PEM) is not None


def entry(path: str, **kw: object) -> FileEntry:
    return FileEntry(path=path, sha256=kw.pop("sha256", DIGEST), size=1, **kw)  # type: ignore[arg-type]


def test_a_manifest_with_sensitive_names_is_refused_naming_each() -> None:
    manifest = Manifest(
        files=[entry("common/.env"), entry("id_rsa"), entry("train.py"), entry("server.pem")]
    )
    with pytest.raises(SensitiveFiles) as err:
        refuse_manifest(manifest)
    assert err.value.details["files"] == ["common/.env", "id_rsa", "server.pem"]
    assert err.value.exit_code == 2
    assert "sf secret set NAME" in (err.value.hint or "")


def test_a_manifest_is_refused_for_a_blob_whose_content_is_a_key() -> None:
    blobs = {DIGEST: PEM, "cd" * 32: b"print('hi')\n"}
    manifest = Manifest(files=[entry("notes.txt"), entry("train.py", sha256="cd" * 32)])
    with pytest.raises(SensitiveFiles) as err:
        refuse_manifest(manifest, read_head=blobs.get)
    assert err.value.details["files"] == ["notes.txt"]
    assert "private key" in err.value.details["reasons"]["notes.txt"]


def test_a_manifest_link_to_a_sensitive_name_is_refused() -> None:
    manifest = Manifest(files=[entry("secrets/k.txt"), entry("a.txt", symlink="secrets/k.txt")])
    with pytest.raises(SensitiveFiles) as err:
        refuse_manifest(manifest)
    assert err.value.details["files"] == ["a.txt", "secrets/k.txt"]


def test_a_clean_manifest_passes() -> None:
    refuse_manifest(Manifest(files=[entry("train.py")]), read_head=lambda _: b"print(1)\n")


@pytest.mark.parametrize("target", ["../../etc/passwd", "/etc/passwd", "../..", "a/../../../x"])
def test_a_manifest_link_may_not_point_out_of_the_package(target: str) -> None:
    with pytest.raises(ValueError, match=r"symlink|inside the lab"):
        entry("common/a.txt", symlink=target)
