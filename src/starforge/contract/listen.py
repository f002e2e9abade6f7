"""Where the control plane may listen, and how: plain HTTP only where nobody else can listen in.

On a loopback address (the embedded default, 127.0.0.1) plain HTTP is fine: tokens never leave
the machine. On any other address a bearer token in plain HTTP can be read by anyone on the path,
so the server refuses to start unless it is given a certificate and key (uvicorn serves TLS) or
is told it sits behind a proxy that terminates TLS (``--behind-proxy``). The check is one pure
function (no I/O), run by ``sf server start`` before it starts anything and by the server itself.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path

from starforge.contract.errors import UsageError

LOCAL_NAMES = {"localhost", "ip6-localhost"}


@dataclass(frozen=True)
class Listen:
    host: str
    tls_cert: Path | None = None
    tls_key: Path | None = None
    behind_proxy: bool = False

    @property
    def tls(self) -> bool:
        return self.tls_cert is not None

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"


def is_loopback(host: str) -> bool:
    name = host.strip().strip("[]").lower()
    if name in LOCAL_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def check(listen: Listen) -> None:
    """Raise UsageError for a listening setup that would send tokens in the clear."""
    if (listen.tls_cert is None) != (listen.tls_key is None):
        raise UsageError(
            "--tls-cert and --tls-key go together",
            hint="give both: the certificate (PEM) and its private key (PEM)",
        )
    if listen.tls and listen.behind_proxy:
        raise UsageError(
            "--behind-proxy and --tls-cert exclude each other",
            hint="either the proxy terminates TLS (--behind-proxy) or this server does (--tls-*)",
        )
    if is_loopback(listen.host) or listen.tls or listen.behind_proxy:
        return
    raise UsageError(
        f"refusing to serve plain HTTP on {listen.host}: tokens would cross the network in "
        "the clear",
        hint="give --tls-cert CERT.pem --tls-key KEY.pem, or --behind-proxy when a proxy in "
        "front terminates TLS (see docs/deploy.md)",
    )
