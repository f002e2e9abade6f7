"""A lab's own certificate authority for tests, made with the ``openssl`` command: the CA's
certificate (what clients are given) and a server certificate it signed for 127.0.0.1."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class LabCA:
    ca: Path  # the CA's certificate: what clients and the server's tls_ca_file are given
    cert: Path  # the server's certificate, signed by the CA
    key: Path  # its private key


def openssl(*args: str | Path) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)


def make_lab_ca(folder: Path, san: str = "IP:127.0.0.1") -> LabCA:
    """``ca.pem``, ``cert.pem`` and ``key.pem`` in ``folder``: a CA, and a certificate it signed
    for ``san`` (the subjectAltName the client checks)."""
    folder.mkdir(parents=True, exist_ok=True)
    ca, ca_key = folder / "ca.pem", folder / "ca.key"
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-subj", "/CN=StarForge test lab CA", "-keyout", ca_key, "-out", ca,
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign")  # fmt: skip
    cert, key, csr = folder / "cert.pem", folder / "key.pem", folder / "server.csr"
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=starforge test server",
            "-keyout", key, "-out", csr)  # fmt: skip
    ext = folder / "server.ext"
    ext.write_text(f"subjectAltName={san}\nbasicConstraints=CA:FALSE\n")
    openssl("x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
            "-days", "1", "-out", cert, "-extfile", ext)  # fmt: skip
    return LabCA(ca=ca, cert=cert, key=key)
