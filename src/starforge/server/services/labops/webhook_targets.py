"""Where a webhook may be sent (SSRF): URL parsing, the address policy, and the pinned target.

Pure functions over :mod:`ipaddress`, except :func:`system_resolve` (the one call to DNS), which
callers inject so that tests resolve without a network.

* A webhook URL is ``http``/``https`` with a host and no credentials; anything else, a malformed
  URL included (``http://[::1``), is a :class:`UsageError` (a 4xx), never a crash.
* Every spelling of an address is read the way a resolver would (``0x7f000001``, ``2130706433``,
  ``127.1``, ``0177.0.0.1``, ``[::ffff:127.0.0.1]``), so a spelling cannot slip past the check;
  a host whose last label is a number but is no address is refused, and ``localhost`` names
  (RFC 6761) are refused without asking DNS.
* :func:`pin` resolves a name **once**, checks every address it resolved to and answers the
  :class:`Target` to connect to: that address, with the original ``Host`` header and, for https,
  the name as TLS SNI and certificate name. Nothing resolves the name again before the connection,
  so an answer that changes between the check and the connection (DNS rebinding) is not followed.
* :class:`Policy`: an address must be public (not loopback, private, link-local, multicast,
  reserved, unspecified, shared or documentation space; IPv4 embedded in IPv6 is judged as IPv4)
  unless it lies in a CIDR an admin allowed (``notify_allow_cidrs``), or private addresses are
  allowed altogether (``notify_allow_private``; the embedded single-user server by default).
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from starforge.contract.errors import UsageError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], Sequence[str]]  # (host, port) → addresses, as text

DEFAULT_PORTS = {"http": 80, "https": 443}
HINT = (
    "an admin may allow an address range in server.yaml (notify_allow_cidrs: [10.20.0.0/16]) "
    "or every private address (notify_allow_private: true)"
)
_NUMBER = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$", re.IGNORECASE)
_LABEL = re.compile(r"^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


@dataclass(frozen=True)
class Policy:
    """Which addresses a webhook may reach."""

    allow_private: bool = False
    allowed: tuple[IPNetwork, ...] = field(default=())

    def refusal(self, ip: IPAddress) -> str | None:
        """Why ``ip`` may not be reached (e.g. ``"loopback"``), or None if it may."""
        if self.allow_private or any(_within(ip, net) for net in self.allowed):
            return None
        return non_public(ip)


@dataclass(frozen=True)
class Parsed:
    """A webhook URL, taken apart: ``ip`` is set when the host is an address in any spelling."""

    scheme: str
    host: str  # a lower-case ASCII name, or the address in its canonical form
    ip: IPAddress | None
    port: int
    target: str  # path and query, what the request line carries
    host_header: str


@dataclass(frozen=True)
class Target:
    """Where a try connects: ``url`` names the checked address itself."""

    url: str
    address: str
    host_header: str
    sni: str | None  # https to a name: the name to send as SNI and to verify the certificate for


def _within(ip: IPAddress, net: IPNetwork) -> bool:
    return ip.version == net.version and ip in net


def _embedded_v4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def non_public(ip: IPAddress) -> str | None:
    """What kind of non-public address ``ip`` is, or None for a public unicast address."""
    if isinstance(ip, ipaddress.IPv6Address):
        inner = _embedded_v4(ip)
        if inner is not None:
            return non_public(inner)
        if ip.scope_id:
            return "scoped"
        if ip.is_site_local:
            return "site-local"
    for kind, hit in (
        ("unspecified", ip.is_unspecified),
        ("loopback", ip.is_loopback),
        ("link-local", ip.is_link_local),
        ("multicast", ip.is_multicast),
        ("private", ip.is_private),
        ("reserved", ip.is_reserved),
    ):
        if hit:
            return kind
    return None if ip.is_global else "non-global"


def numeric_ipv4(host: str) -> ipaddress.IPv4Address | None:
    """``host`` read as a resolver reads a numeric IPv4 (1 to 4 parts, each decimal, 0-octal or
    0x-hex; the last fills the remaining bytes); None if its last label is not a number; a
    :class:`UsageError` if it is one but ``host`` is no address."""
    parts = host.split(".")
    if len(parts) > 1 and parts[-1] == "":
        parts.pop()  # a trailing dot
    if not parts or not _NUMBER.match(parts[-1]):
        return None
    if len(parts) > 4 or not all(_NUMBER.match(p) for p in parts):
        raise UsageError(f"webhook host {host!r} ends in a number but is not an IPv4 address")
    numbers = []
    for part in parts:
        if part[:2].lower() == "0x":
            numbers.append(int(part[2:] or "0", 16))
        elif len(part) > 1 and part.startswith("0"):
            if not set(part) <= set("01234567"):
                raise UsageError(f"webhook host {host!r}: {part!r} is not an octal number")
            numbers.append(int(part, 8))
        else:
            numbers.append(int(part))
    *head, last = numbers
    if any(n > 255 for n in head) or last >= 256 ** (5 - len(numbers)):
        raise UsageError(f"webhook host {host!r} is out of the IPv4 range")
    value = last
    for i, n in enumerate(head):
        value += n << (8 * (3 - i))
    return ipaddress.IPv4Address(value)


def _host(raw: str, url: str) -> tuple[str, IPAddress | None]:
    if ":" in raw:  # only an IPv6 literal has a colon in urlsplit's hostname
        try:
            ip6 = ipaddress.IPv6Address(raw)
        except ValueError:
            raise UsageError(f"webhook URL {url!r}: {raw!r} is not an IPv6 address") from None
        ip: IPAddress = ip6.ipv4_mapped or ip6  # judged, and reached, as the IPv4 it names
        return str(ip), ip
    ip4 = numeric_ipv4(raw)
    if ip4 is not None:
        return str(ip4), ip4
    try:
        name = raw.rstrip(".").encode("idna").decode("ascii").lower()
    except UnicodeError:
        raise UsageError(f"webhook URL {url!r}: {raw!r} is not a valid host name") from None
    if not name or len(name) > 253 or not all(_LABEL.match(label) for label in name.split(".")):
        raise UsageError(f"webhook URL {url!r}: {raw!r} is not a valid host name")
    return name, None


def parse(url: str) -> Parsed:
    """``url`` taken apart, or a :class:`UsageError` saying what is wrong with it."""
    text = url.strip()
    try:
        parts = urlsplit(text)
        raw_host, port = parts.hostname, parts.port
    except ValueError as exc:
        raise UsageError(f"webhook URL {url!r} is malformed: {exc}") from None
    if parts.scheme not in DEFAULT_PORTS:
        raise UsageError(
            f"webhook URL {url!r}: only http:// and https:// URLs are allowed",
            hint="e.g. https://hooks.example.com/starforge",
        )
    if not raw_host:
        raise UsageError(f"webhook URL {url!r} names no host")
    if parts.username is not None or parts.password is not None:
        raise UsageError(
            f"webhook URL {url!r} carries credentials",
            hint="the payload is signed: check the X-StarForge-Signature header instead",
        )
    if any(c.isspace() or ord(c) < 0x20 for c in text):
        raise UsageError(f"webhook URL {url!r} contains white space or control characters")
    host, ip = _host(raw_host, url)
    if host == "localhost" or host.endswith(".localhost"):
        raise UsageError(
            f"webhook URL {url!r} reaches a non-public address (localhost)",
            hint=HINT,
            details={"address": host, "kind": "loopback"},
        )
    if port == 0:
        raise UsageError(f"webhook URL {url!r} has an invalid port")
    default = DEFAULT_PORTS[parts.scheme]
    shown = f"[{ip}]" if isinstance(ip, ipaddress.IPv6Address) else host
    header = shown if port in (None, default) else f"{shown}:{port}"
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Parsed(parts.scheme, host, ip, port or default, target, header)


def _refuse(url: str, address: str, kind: str) -> UsageError:
    return UsageError(
        f"webhook URL {url!r} reaches a non-public address ({address}, {kind})",
        hint=HINT,
        details={"address": address, "kind": kind},
    )


def _literal(ip: IPAddress) -> str:
    return f"[{ip}]" if isinstance(ip, ipaddress.IPv6Address) else str(ip)


def system_resolve(host: str, port: int) -> list[str]:
    """The addresses DNS (or the hosts file) gives ``host``, in the system's order."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise UsageError(f"webhook host {host!r} does not resolve: {exc}") from None
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def _resolved(parsed: Parsed, url: str, resolve: Resolver) -> list[IPAddress]:
    if parsed.ip is not None:
        return [parsed.ip]
    answers = list(resolve(parsed.host, parsed.port))
    if not answers:
        raise UsageError(f"webhook host {parsed.host!r} resolves to no address")
    found: list[IPAddress] = []
    for answer in answers:
        try:
            ip = ipaddress.ip_address(answer)
        except ValueError:
            raise UsageError(f"webhook host {parsed.host!r} resolved to {answer!r}") from None
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        found.append(ip)
    return found


def pin(url: str, policy: Policy, resolve: Resolver = system_resolve) -> Target:
    """Resolve ``url``'s host once, check every address, and answer the first as the target;
    a :class:`UsageError` if the URL is malformed or any address is refused."""
    parsed = parse(url)
    addresses = _resolved(parsed, url, resolve)
    for ip in addresses:
        kind = policy.refusal(ip)
        if kind is not None:
            raise _refuse(url, str(ip), kind)
    ip = addresses[0]
    return Target(
        url=f"{parsed.scheme}://{_literal(ip)}:{parsed.port}{parsed.target}",
        address=str(ip),
        host_header=parsed.host_header,
        sni=parsed.host if parsed.scheme == "https" and parsed.ip is None else None,
    )


def check(url: str, policy: Policy, resolve: Resolver = system_resolve) -> str:
    """``url`` (stripped) if a webhook may be registered there, else a :class:`UsageError`.
    Private addresses allowed altogether: the URL is only parsed (its name may resolve later)."""
    if policy.allow_private:
        parse(url)
    else:
        pin(url, policy, resolve)
    return url.strip()
