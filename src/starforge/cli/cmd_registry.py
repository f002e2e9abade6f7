"""``sf admin registry allow|deny|ls|login|logout``: which registries images may come from, and
the credentials the server uses for a registry that asks for them (admins only).

A login is stored per registry host (``HOST[:PORT]``, as image references name it), its password
sealed at rest like secrets. The server uses it to resolve a tag's digest at admission and hands
it to a run's runner for the pull of the run's image (in an auth file that exists for the pull
only); the job never sees it. The password comes from standard input (``--password-stdin``, or
whenever stdin is not a terminal) or a hidden prompt, never from an argument (it would stay in the
shell's history and in ``ps``), and is never printed.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from starforge.cli.output import JsonOpt, ago, out

if TYPE_CHECKING:
    from starforge.contract.images import ImageAdmin
    from starforge.contract.registries import RegistryLoginList

app = typer.Typer(
    help="Registries: the allowlist (images only from these; none listed: any) and the logins "
    "the server uses for registries that ask for credentials.",
    no_args_is_help=True,
)


def _set_allowed(entry: str, allowed: bool, json_out: bool) -> None:
    """Add ``entry`` to the allowlist or remove it, then show the list as it is now."""
    from starforge.cli.connect import request

    found = request(json_out, lambda client: client.update_registry(entry, allowed=allowed))
    _print_registries(found)


def _print_registries(found: ImageAdmin) -> None:
    out.table(["REGISTRY", "SET IN"], [[e.entry, e.source] for e in found.registries])
    out.line(escape(found.summary))


@app.command("allow")
def registry_allow(
    entry: Annotated[str, typer.Argument(help="HOST[:PORT][/PREFIX], e.g. ghcr.io/my-lab.")],
    json_out: JsonOpt = False,
) -> None:
    """Allow images from a registry (or from a prefix of it).

    Example: sf admin registry allow 127.0.0.1:5000/lab
    """
    _set_allowed(entry, True, json_out)


@app.command("deny")
def registry_deny(
    entry: Annotated[str, typer.Argument(help="An entry `sf admin registry ls` lists.")],
    json_out: JsonOpt = False,
) -> None:
    """Remove an entry from the allowlist (the last one removed allows every registry again).

    Example: sf admin registry deny 127.0.0.1:5000/lab
    """
    _set_allowed(entry, False, json_out)


def _show_logins(found: RegistryLoginList) -> None:
    if not found.logins:
        out.line("no registry logins (`sf admin registry login HOST` stores one)")
        return
    rows = [[i.host, i.username, i.set_by, ago(i.updated_at)] for i in found.logins]
    out.table(["LOGIN FOR", "USERNAME", "SET BY", "UPDATED"], rows)


@app.command("ls")
def registry_ls(json_out: JsonOpt = False) -> None:
    """List the allowed registries (with none, every registry is allowed) and the registries the
    server holds a login for (hosts and usernames; never a password).

    Example: sf admin registry ls
    """
    from starforge.cli.connect import connect
    from starforge.client import registries

    out.set_json(json_out)
    with connect() as client:
        found = client.image_settings()
        logins = registries.logins(client)
    out.data({**found.model_dump(mode="json"), **logins.model_dump(mode="json")})
    _print_registries(found)
    _show_logins(logins)


def _read_password(host: str, from_stdin: bool) -> str:
    from starforge.contract.errors import UsageError

    if from_stdin or not sys.stdin.isatty():
        password = sys.stdin.read().removesuffix("\n").removesuffix("\r")
    else:
        password = typer.prompt(f"password for {host}", hide_input=True)
    if not password:
        raise UsageError(
            f"registry {host}: the password is empty",
            hint=f'pipe it in: echo "$TOKEN" | sf admin registry login {host} --username USER '
            "--password-stdin",
        )
    return password


@app.command("login")
def registry_login(
    host: Annotated[str, typer.Argument(help="The registry: HOST[:PORT], e.g. nvcr.io.")],
    username: Annotated[
        str | None, typer.Option("--username", "-u", help="The account (asked when omitted).")
    ] = None,
    password_stdin: Annotated[
        bool, typer.Option("--password-stdin", help="Read the password (or token) from stdin.")
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Store the credentials the server uses for a registry (replacing any it had).

    They serve admission (a tag's digest) and the pull of every run's image from that registry.
    Example: echo "$NGC_API_KEY" | sf admin registry login nvcr.io -u '$oauthtoken' --password-stdin
    """
    from starforge.cli.connect import connect
    from starforge.client import registries
    from starforge.contract.errors import UsageError
    from starforge.contract.registries import check_registry_host

    out.set_json(json_out)
    host = check_registry_host(host)  # before anything is asked for
    if username is None:
        if password_stdin or not sys.stdin.isatty():
            raise UsageError(
                "--username is needed when the password comes from stdin",
                hint=f"sf admin registry login {host} --username USER --password-stdin",
            )
        username = typer.prompt(f"username for {host}")
    if not username.strip():
        raise UsageError("the username is empty", hint="give --username USER")
    password = _read_password(host, password_stdin)
    with connect() as client:
        info = registries.login(client, host, username.strip(), password)
    out.data(info.model_dump(mode="json"))
    out.success(f"login stored for {info.host} (user {escape(info.username)})")


@app.command("logout")
def registry_logout(
    host: Annotated[str, typer.Argument(help="A registry `sf admin registry ls` lists.")],
    json_out: JsonOpt = False,
) -> None:
    """Remove the credentials the server holds for a registry.

    Example: sf admin registry logout nvcr.io
    """
    from starforge.cli.connect import request
    from starforge.client import registries

    done = request(json_out, lambda client: registries.logout(client, host))
    if done.removed:
        out.success(f"login for {done.host} removed")
    else:
        out.line(f"no login was stored for {done.host}")
