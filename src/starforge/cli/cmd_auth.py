"""``sf login|logout|whoami``, ``sf token create|ls|revoke``: who the CLI is, on which server.

``sf login`` checks the token against the server before it saves anything, and saves the server
and token in ``$STARFORGE_HOME/credentials`` (mode 0600); later commands use that server until
``sf logout``. Without a login the embedded local server is used, with no set-up at all. A token
is shown once, when it is created; the server keeps only its sha256.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from starforge.cli.output import JsonOpt, ago, out

if TYPE_CHECKING:
    from starforge.contract.auth import TokenView

token_app = typer.Typer(
    help="Your API tokens: create one for a script or another machine, list, revoke.",
    no_args_is_help=True,
)


def _when(at: datetime | None, never: str = "never") -> str:
    return at.strftime("%Y-%m-%d %H:%M") if at else never


def login(
    server: Annotated[
        str, typer.Option("--server", help="The server's URL, e.g. https://forge.lab.example")
    ],
    token: Annotated[
        str | None,
        typer.Option("--token", help="Your token (asked for, hidden, when not given)."),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Sign in to a team server; later commands use it until `sf logout`.

    Examples:

      sf login --server https://forge.lab.example

      sf login --server https://forge.lab.example --token "$STARFORGE_TOKEN" --json

      sf --ca-file lab-ca.pem login --server https://forge.lab.example  (keeps the CA too)
    """
    from starforge.client import config
    from starforge.client.http import Client
    from starforge.contract.errors import UsageError

    out.set_json(json_out)
    url = server.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise UsageError(
            f"--server {server!r} is not a URL", hint="e.g. --server https://forge.lab.example"
        )
    secret = (token if token is not None else typer.prompt("token", hide_input=True)).strip()
    if not secret:
        raise UsageError("the token is empty", hint="paste the token an admin gave you")
    ca = config.chosen_ca_file()  # `sf --ca-file CA.pem login ...`: kept with the login
    with Client(url, token=secret, ca_file=ca) as client:
        me = client.whoami()  # refuses a wrong token before anything is saved
    path = config.save_credentials(url, secret, me.user, ca=ca)
    out.data({"server": url, "user": me.user, "role": me.role, "credentials": str(path)})
    out.success(f"logged in to {escape(url)} as [bold]{escape(me.user)}[/bold] ({me.role})")


def logout(json_out: JsonOpt = False) -> None:
    """Forget the saved server and token; commands go back to the local embedded server.

    Example: sf logout
    """
    from starforge.client import config

    out.set_json(json_out)
    removed = config.forget_credentials()
    out.data({"logged_out": removed})
    out.success("logged out" if removed else "not logged in (nothing to forget)")


def whoami(json_out: JsonOpt = False) -> None:
    """Show who you are on which server: user, role, server URL and versions.

    Example: sf whoami --json
    """
    from starforge import __version__
    from starforge.cli.connect import connect
    from starforge.client import config

    out.set_json(json_out)
    source = (
        "environment"
        if config.remote_from_env()
        else "login"
        if config.read_credentials()
        else "embedded"
    )
    with connect() as client:
        me, info = client.whoami(), client.info()
        url = client.base_url
    state = {
        "user": me.user,
        "role": me.role,
        "server": url,
        "server_version": info.version,
        "client_version": __version__,
        "via": source,
    }
    out.data(state)
    out.line(f"[bold]{escape(me.user)}[/bold] ({me.role})")
    out.line(f"  server  {escape(url)} ({source}, version {info.version})")
    out.line(f"  client  {__version__}")


def _token_rows(tokens: list[TokenView]) -> list[list[str]]:
    rows = []
    for t in tokens:
        state = "revoked" if t.revoked_at else "live"
        rows.append(
            [
                str(t.id),
                t.name,
                state,
                _when(t.created_at),
                _when(t.expires_at),
                ago(t.last_used_at),
            ]
        )
    return rows


@token_app.command("create")
def token_create(
    name: Annotated[
        str | None, typer.Option("--name", help="A name to recognise it by (default token-N).")
    ] = None,
    expires: Annotated[
        int | None,
        typer.Option("--expires", min=1, max=3650, help="Days until it expires (default never)."),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Create a token for yourself; it is printed once, keep it.

    Examples:

      sf token create --name laptop --expires 90

      sf token create --json   (the token is in "token")
    """
    from starforge.cli.connect import connect
    from starforge.contract.names import SAFE_SEGMENT

    out.set_json(json_out)
    if name is not None and not SAFE_SEGMENT.match(name):
        raise typer.BadParameter("letters, digits, '.', '_' and '-' only", param_hint="--name")
    with connect() as client:
        made = client.create_token(name=name, expires_days=expires)
    out.data({"token": made.token, "user": made.user, **made.info.model_dump(mode="json")})
    out.success(f"token {made.info.name} created for {made.user}; it is shown only this once:")
    out.line(made.token)


@token_app.command("ls")
def token_ls(json_out: JsonOpt = False) -> None:
    """List your tokens (never their secret).

    Example: sf token ls
    """
    from starforge.cli.connect import connect

    out.set_json(json_out)
    with connect() as client:
        found = client.tokens()
    out.data([t.model_dump(mode="json") for t in found.tokens])
    out.table(["ID", "NAME", "STATE", "CREATED", "EXPIRES", "LAST USED"], _token_rows(found.tokens))


@token_app.command("revoke")
def token_revoke(
    ref: Annotated[str, typer.Argument(help="The token's name or id (see `sf token ls`).")],
    json_out: JsonOpt = False,
) -> None:
    """Revoke one of your tokens; anything using it is refused from now on.

    Example: sf token revoke laptop
    """
    from starforge.cli.connect import request

    done = request(json_out, lambda client: client.revoke_token(ref))
    out.success(f"token {done.name} revoked")
