"""``tls_ca_file``: read from server.yaml, refused at start when runners could not use it, and
handed to every runner in its binding and to its job as ``STARFORGE_CA_FILE``."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from starforge.contract.env import job_env
from starforge.contract.layout import RunLayout
from starforge.server.settings import load_settings
from tests.contract.test_env import binding, spec
from tests.tls_certs import make_lab_ca

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed")


def test_the_ca_file_in_server_yaml_is_what_bindings_carry(tmp_path: Path) -> None:
    ca = make_lab_ca(tmp_path).ca
    (tmp_path / "server.yaml").write_text(yaml.safe_dump({"tls_ca_file": str(ca)}))
    settings = load_settings(tmp_path)
    assert settings.tls_ca_file == ca.resolve()
    assert settings.tls_ca_pem() == ca.read_text()
    assert load_settings(tmp_path / "other").tls_ca_pem() == ""  # unset: the default bundle


def test_a_ca_file_runners_could_not_use_is_refused_naming_the_setting(tmp_path: Path) -> None:
    not_pem = tmp_path / "key.txt"
    not_pem.write_text("not a certificate\n")
    for given in (not_pem, tmp_path / "missing.pem"):
        (tmp_path / "server.yaml").write_text(yaml.safe_dump({"tls_ca_file": str(given)}))
        with pytest.raises(ValidationError, match=f"tls_ca_file {given}: not a readable PEM"):
            load_settings(tmp_path)


def test_the_job_is_told_where_its_copy_of_the_ca_is_only_when_there_is_one() -> None:
    b = binding()
    assert "STARFORGE_CA_FILE" not in job_env(spec(), b)
    with_ca = b.model_copy(update={"tls_ca": "-----BEGIN CERTIFICATE-----\n"})
    expected = RunLayout(Path(b.run_dir)).ca_file
    assert job_env(spec(), with_ca)["STARFORGE_CA_FILE"] == str(expected)
    assert str(expected) == f"{b.out_dir}/.starforge/ca.pem"  # in out: the job's uid reads it
