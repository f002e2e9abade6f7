"""The quick paths of the path and content checks (taken for the ordinary case, so 10,000 files
pack fast) accept nothing the full checks refuse and miss nothing they find."""

from __future__ import annotations

import pytest

from starforge.contract.jobspec import check_relpath
from starforge.contract.sensitive import check_content, check_path


@pytest.mark.parametrize(
    "path",
    [
        "",
        "/etc/passwd",
        "a//b",
        "a/./b",
        "./a",
        "a/",
        "a/../b",
        "..",
        "a\\b",
        "a\nb",
        "a\x00b",
        "a\x7fb",
        "a/" + "c" * 256,
        "é/" + "é" * 128,
        "a/" * 2049 + "b",
    ],
)
def test_paths_the_full_check_refuses_are_still_refused(path: str) -> None:
    with pytest.raises(ValueError):
        check_relpath(path)


@pytest.mark.parametrize("path", ["a", "exp/c1/train.py", "é/données.jsonl", "a/" + "c" * 255])
def test_ordinary_paths_are_accepted_unchanged(path: str) -> None:
    assert check_relpath(path) == path


@pytest.mark.parametrize(
    ("path", "rule"),
    [
        ("./.ssh/config", "dir:.ssh"),
        ("a//.env", "name:.env"),
        ("/abs/Secrets/x.txt", "dir:secrets"),
        ("configs/./prod.PEM", "name:*.pem"),
        ("data/my_credentials_2.json", "name:*credentials*.json"),
    ],
)
def test_unusual_spellings_of_credential_paths_are_still_found(path: str, rule: str) -> None:
    found = check_path(path)
    assert found is not None and found.rule == rule


@pytest.mark.parametrize(
    ("content", "rule"),
    [
        # Decoys that hold a signature's cue but not the signature come before the credential.
        (b"task-1 hf_x sk-short xoxo\nWANDB_API_KEY=" + b"ab12" * 10, "content.wandb_key"),
        (
            b"note: aws_secret_access_key\nAWS_SECRET_ACCESS_KEY = " + b"Ab/+" * 10,
            "content.aws_secret",
        ),
        (b"through the high gh\nghs_" + b"A1" * 18, "content.github_token"),
    ],
)
def test_a_credential_after_decoys_is_still_found(content: bytes, rule: str) -> None:
    found = check_content(content)
    assert found is not None and found.rule == rule


def test_text_with_cues_but_no_credential_is_not_flagged() -> None:
    assert check_content(b"task-list: hf_hub xox PRIVATE KEY ideas, wandb api docs") is None
