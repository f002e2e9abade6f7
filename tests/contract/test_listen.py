"""Where the server may serve plain HTTP: loopback only, unless TLS or a proxy is declared."""

from __future__ import annotations

from pathlib import Path

import pytest

from starforge.contract.errors import UsageError
from starforge.contract.listen import Listen, check

PEM = Path("cert.pem"), Path("key.pem")


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"])
def test_plain_http_on_a_loopback_address_is_allowed(host: str) -> None:
    check(Listen(host))


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "forge.lab.example"])
def test_plain_http_off_loopback_is_refused_naming_both_ways_out(host: str) -> None:
    with pytest.raises(UsageError) as err:
        check(Listen(host))
    assert f"refusing to serve plain HTTP on {host}" in err.value.message
    assert "--tls-cert" in (err.value.hint or "") and "--behind-proxy" in (err.value.hint or "")


def test_a_certificate_or_a_declared_proxy_allows_any_address() -> None:
    check(Listen("0.0.0.0", *PEM))
    check(Listen("0.0.0.0", behind_proxy=True))
    assert Listen("0.0.0.0", *PEM).scheme == "https"


def test_a_certificate_without_its_key_or_with_a_proxy_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="go together"):
        check(Listen("0.0.0.0", tls_cert=PEM[0]))
    with pytest.raises(UsageError, match="exclude each other"):
        check(Listen("0.0.0.0", *PEM, behind_proxy=True))
