"""The distribution spec's authentication, as Docker Hub, ghcr.io and nvcr.io run it.

A registry answers an anonymous request with ``401`` and a challenge in ``WWW-Authenticate``:

- ``Bearer realm="https://auth.example/token",service="registry.example",scope="..."``: the
  client asks the realm for a token (``GET realm?service=S&scope=repository:NAME:pull``),
  anonymously or with the login in HTTP Basic, reads ``token`` (or the OAuth2 ``access_token``)
  from the JSON answer, and repeats its request with ``Authorization: Bearer TOKEN``;
- ``Basic realm="..."``: the client repeats its request with the login in HTTP Basic.

:func:`parse_challenges` reads the header (RFC 9110 §11: several challenges, comma-separated,
quoted or plain parameter values, token68); :func:`authorize` runs the exchange and answers the
repeated request, or raises one of the admission errors with a stable code:
:class:`~starforge.contract.errors.RegistryLoginNeeded` (credentials needed, none stored: it names
``sf admin registry login HOST``), :class:`~starforge.contract.errors.RegistryLoginRefused` (the
stored login was refused) and :class:`~starforge.contract.errors.RegistryAuthUnreachable`.

A login is never sent over plain HTTP to a realm that is not on a loopback address or listed in
``insecure_registries``, and the server looks a login up only once a registry has asked for one.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from starforge.contract.errors import (
    RegistryAuthUnreachable,
    RegistryLoginNeeded,
    RegistryLoginRefused,
    Rejected,
)
from starforge.contract.images import ImageRef

_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_TOKEN68 = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')
_ESCAPED = re.compile(r"\\(.)")
_SPACE = " \t"


@dataclass(frozen=True)
class Challenge:
    scheme: str  # lower case: "bearer", "basic"
    params: dict[str, str] = field(default_factory=dict)  # names in lower case
    token68: str = ""


@dataclass(frozen=True)
class Login:
    username: str
    password: str


LoginLookup = Callable[[str], "Login | None"]


def _skip(header: str, pos: int, chars: str) -> int:
    while pos < len(header) and header[pos] in chars:
        pos += 1
    return pos


def _param_value(header: str, pos: int) -> tuple[str, int] | None:
    """The value at ``pos`` (a quoted string, unescaped, or a token) and where it ends."""
    quoted = _QUOTED.match(header, pos)
    if quoted:
        return _ESCAPED.sub(r"\1", quoted.group(1)), quoted.end()
    plain = _TOKEN.match(header, pos)
    return (plain.group(), plain.end()) if plain else None


def _token68_at(header: str, pos: int) -> str:
    """The token68 right after a scheme (``Basic dXNlcjpwdw==``), or "" when what follows is a
    list of parameters instead."""
    match = _TOKEN68.match(header, pos)
    if match is None:
        return ""
    end = _skip(header, match.end(), _SPACE)
    return match.group() if end == len(header) or header[end] == "," else ""


def parse_challenges(header: str) -> list[Challenge]:
    """Every challenge in a ``WWW-Authenticate`` value, in order; parsing stops at the first
    malformed part (what came before it stands)."""
    found: list[Challenge] = []
    pos = 0
    while True:
        pos = _skip(header, pos, _SPACE + ",")
        word = _TOKEN.match(header, pos)
        if word is None:
            return found
        after = _skip(header, word.end(), _SPACE)
        if found and after < len(header) and header[after] == "=":
            value = _param_value(header, _skip(header, after + 1, _SPACE))
            if value is None:
                return found
            found[-1].params[word.group().lower()] = value[0]
            pos = value[1]
            continue
        token68 = _token68_at(header, after) if after > word.end() else ""
        found.append(Challenge(scheme=word.group().lower(), token68=token68))
        pos = after + len(token68)


def basic_header(login: Login) -> str:
    pair = f"{login.username}:{login.password}".encode()
    return "Basic " + base64.b64encode(pair).decode()


def challenges_of(resp: httpx.Response) -> list[Challenge]:
    found: list[Challenge] = []
    for value in resp.headers.get_list("www-authenticate"):
        found += parse_challenges(value)
    return found


@dataclass(frozen=True)
class Exchange:
    """One authenticated request to a registry: what to ask again, and how to name it."""

    client: httpx.Client
    image: ImageRef
    url: str  # the request to repeat with credentials
    headers: dict[str, str]
    where: str  # registry/repository:tag, for messages
    plain_ok: Callable[[str], bool]  # whether a host may be spoken to over plain HTTP

    @property
    def details(self) -> dict[str, str]:
        return {"registry": self.image.registry, "url": self.url}


def authorize(ex: Exchange, first: httpx.Response, lookup: LoginLookup | None) -> httpx.Response:
    """Answer the registry's challenge in ``first`` (a 401 or 403) and return the repeated
    request's answer; raise a :class:`Rejected` when no credentials get through."""
    challenges = challenges_of(first)
    bearer = next((c for c in challenges if c.scheme == "bearer" and c.params.get("realm")), None)
    basic = any(c.scheme == "basic" for c in challenges)
    if bearer is None and not basic:
        raise _needs_login(ex, first.status_code)
    login = lookup(ex.image.registry) if lookup is not None else None
    if bearer is not None:
        auth = f"Bearer {fetch_token(ex, bearer, login)}"
    elif login is not None:
        auth = basic_header(login)
    else:
        raise _needs_login(ex, first.status_code)
    try:
        again = ex.client.head(ex.url, headers={**ex.headers, "Authorization": auth})
    except httpx.HTTPError as exc:
        raise Rejected(
            f"image registry {ex.image.registry} went away during its authentication "
            f"({ex.url}): {exc or type(exc).__name__}",
            hint="check that the registry is up, or pin a digest (IMAGE@sha256:...)",
            details=ex.details,
        ) from exc
    if again.status_code in (401, 403):
        if login is None:  # an anonymous token that does not reach the repository
            raise _needs_login(ex, again.status_code)
        raise _refused(ex, login, f"HTTP {again.status_code} from the registry with its token")
    return again


def fetch_token(ex: Exchange, challenge: Challenge, login: Login | None) -> str:
    """A token from the challenge's realm for pulling the image's repository."""
    realm = challenge.params["realm"]
    details = {**ex.details, "realm": realm}
    try:
        url = httpx.URL(realm)
    except httpx.InvalidURL:
        url = httpx.URL("invalid:")
    if url.scheme not in ("http", "https") or not url.host:
        raise Rejected(
            f"image registry {ex.image.registry} names a token service that is not an http(s) "
            f"URL: {realm!r}",
            hint="check the registry's auth settings, or pin a digest (IMAGE@sha256:...)",
            details=details,
        )
    hostport = f"{url.host}:{url.port}" if url.port else url.host
    if login is not None and url.scheme == "http" and not ex.plain_ok(hostport):
        raise Rejected(
            f"image registry {ex.image.registry} asks for its login at {realm}, over plain "
            "HTTP: the server does not send credentials in the clear",
            hint=f"serve the token service over https, or list {hostport} in "
            "insecure_registries in server.yaml if the network is trusted",
            details=details,
        )
    params = {"scope": f"repository:{ex.image.repository}:pull"}
    if challenge.params.get("service"):
        params["service"] = challenge.params["service"]
    if login is not None:
        params["account"] = login.username
    auth = httpx.BasicAuth(login.username, login.password) if login is not None else None
    try:
        resp = ex.client.get(url.copy_merge_params(params), auth=auth, follow_redirects=True)
    except httpx.HTTPError as exc:
        raise RegistryAuthUnreachable(
            f"the token service of image registry {ex.image.registry} is unreachable "
            f"({realm}): {exc or type(exc).__name__}",
            hint=f"check that {hostport} is reachable from the server, or pin a digest "
            "(IMAGE@sha256:...) to submit without asking the registry",
            details=details,
        ) from exc
    if resp.status_code in (401, 403):
        if login is None:
            raise _needs_login(ex, resp.status_code)
        raise _refused(ex, login, f"HTTP {resp.status_code} from its token service {realm}")
    token = _token_in(resp)
    if resp.status_code != 200 or not token:
        raise Rejected(
            f"the token service of image registry {ex.image.registry} gave no token "
            f"(HTTP {resp.status_code} from {realm})",
            hint="check the registry's token service, or pin a digest (IMAGE@sha256:...)",
            details=details,
        )
    return token


def _token_in(resp: httpx.Response) -> str:
    """``token``, else ``access_token`` (the OAuth2 name some services use), of a JSON answer."""
    try:
        body = resp.json()
    except ValueError:
        return ""
    if not isinstance(body, dict):
        return ""
    token = body.get("token") or body.get("access_token") or ""
    return token if isinstance(token, str) else ""


def _needs_login(ex: Exchange, status: int) -> RegistryLoginNeeded:
    registry = ex.image.registry
    return RegistryLoginNeeded(
        f"image registry {registry} needs credentials to tell the digest of {ex.where} "
        f"(HTTP {status}), and this server holds no login for it",
        hint=f"an admin runs `sf admin registry login {registry}`; or check the image's name "
        "(registries answer 401 for a repository that does not exist too)",
        details={**ex.details, "login": f"sf admin registry login {registry}"},
    )


def _refused(ex: Exchange, login: Login, what: str) -> RegistryLoginRefused:
    registry = ex.image.registry
    return RegistryLoginRefused(
        f"image registry {registry} refused the login stored for it (user {login.username!r}) "
        f"for {ex.where}: {what}",
        hint=f"check that the account may pull {ex.image.repository}, then an admin runs "
        f"`sf admin registry login {registry}` again with working credentials",
        details={**ex.details, "username": login.username},
    )
