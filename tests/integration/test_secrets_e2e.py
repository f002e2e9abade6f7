"""Secrets end to end with a real server, real git and a real runner: ``sf secret set``, a
custom/custom run that prints its secret, the job sees the value, the log shows ``***``, and
``sf job status --json``, ``sf secret ls`` and the database file hold no trace of it; after
``sf admin secrets rotate-key`` the same secret still reaches the next run."""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable
from pathlib import Path

import pytest

from starforge.contract.layout import RunLayout
from starforge.project.lab import Lab
from tests.conftest import Result, commit_all
from tests.integration.conftest import wait_for

pytestmark = pytest.mark.integration
IMAGE = "registry.example/train:v1"
VALUE = "hf_e2e-secret-5c1d9e7a3b"
PEM = "-----BEGIN KEY-----\nfile-secret-e2e-8b2f\n-----END KEY-----\n"
PRINTS_ITS_SECRETS = """
echo "HF_TOKEN is $HF_TOKEN"
printf '%s' "$HF_TOKEN" | sha256sum | cut -d' ' -f1 > "$FORGE_OUT_DIR/hf_token.sha256"
sha256sum < "$KEY_PEM_FILE" | cut -d' ' -f1 > "$FORGE_OUT_DIR/key_pem.sha256"
echo "key file at $KEY_PEM_FILE says $(sed -n 2p "$KEY_PEM_FILE")"
"""


def secret_lab(custom_lab: Callable[..., Lab]) -> Lab:
    lab = custom_lab(steps=2)
    exp = lab.root / "experiments" / "c1"
    script = exp / "train.sh"
    text = script.read_text()
    anchor = 'mkdir -p "$CKPT_DIR"\n'
    script.write_text(text.replace(anchor, anchor + PRINTS_ITS_SECRETS, 1))
    config = exp / "config.yaml"
    config.write_text(config.read_text() + "secrets:\n  - {name: KEY_PEM, as: file}\n")
    commit_all(lab.root, "print the secrets")
    return lab


def run_dir(home: Path, run_id: str) -> Path:
    return next(p for p in home.rglob(run_id) if (p / "out").is_dir())


def finished(sf: Callable[..., Result], lab: Lab) -> tuple[str, dict[str, object]]:
    got = sf(
        "submit", "c1", "--profile", "h200:1", "--image", IMAGE, "--secret", "HF_TOKEN",
        "--json", cwd=lab.root,
    )  # fmt: skip
    assert got.code == 0, got.err
    run_id = str(got.json()["run_id"])  # type: ignore[index]
    view = wait_for(sf, run_id, {"succeeded", "failed"})
    return run_id, view


def test_a_job_receives_its_secrets_and_nothing_else_holds_their_values(
    sf: Callable[..., Result],
    custom_lab: Callable[..., Lab],
    sf_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(VALUE + "\n"))
    assert sf("secret", "set", "HF_TOKEN").code == 0
    pem = tmp_path / "key.pem"
    pem.write_text(PEM)
    assert sf("secret", "set", "KEY_PEM", "--from-file", str(pem)).code == 0
    lab = secret_lab(custom_lab)

    run_id, view = finished(sf, lab)
    folder = run_dir(sf_home, run_id)
    log = "".join(p.read_text() for p in (folder / "logs").glob("*.log"))
    assert view["status"] == "succeeded", log
    assert "HF_TOKEN is ***" in log and "says ***" not in log  # a line of the file: not a value
    assert VALUE not in log and "file-secret-e2e-8b2f" in log.replace("***", "")
    out = folder / "out"
    assert (out / "hf_token.sha256").read_text().strip() == hashlib.sha256(
        VALUE.encode()
    ).hexdigest()
    assert (out / "key_pem.sha256").read_text().strip() == hashlib.sha256(PEM.encode()).hexdigest()
    assert not (folder / "work" / ".starforge" / "secrets").exists()  # removed after the job

    status = sf("job", "status", run_id, "--json")
    listed = sf("secret", "ls", "--json")
    assert {s["name"] for s in listed.json()} == {"HF_TOKEN", "KEY_PEM"}  # type: ignore[union-attr]
    files = [p for p in RunLayout(folder).state.rglob("*") if p.is_file()]  # run.json, bindings
    assert RunLayout(folder).run_json in files
    for text in (status.out, listed.out, *(f.read_text() for f in files)):
        assert VALUE not in text and "file-secret-e2e-8b2f" not in text
    for db in sf_home.rglob("*.db*"):
        assert VALUE.encode() not in db.read_bytes()

    rotated = sf("admin", "secrets", "rotate-key", "--json")
    assert rotated.code == 0 and rotated.json()["reencrypted"] == 2  # type: ignore[index]
    again, view = finished(sf, lab)
    assert view["status"] == "succeeded"
    digest = (run_dir(sf_home, again) / "out" / "hf_token.sha256").read_text().strip()
    assert digest == hashlib.sha256(VALUE.encode()).hexdigest()
