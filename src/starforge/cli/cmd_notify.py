"""``sf notify add|ls|rm|log``: webhooks called when your runs end.

Each payload is JSON, signed with HMAC-SHA256 under the endpoint's secret (printed once, at
``add``): ``X-StarForge-Signature: sha256=HEX`` over ``"{X-StarForge-Timestamp}.{body}"``.
Failed deliveries are retried with exponential backoff; ``sf notify log`` shows every try.
A lab server refuses URLs that reach loopback, private or other non-public addresses (its admin
may allow ranges: ``notify_allow_cidrs``); adding a webhook needs the member role or above.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from starforge.cli.output import JsonOpt, out

app = typer.Typer(
    help="Webhooks called when your runs end (signed, retried).", no_args_is_help=True
)


@app.command("add")
def add(
    url: Annotated[str, typer.Argument(help="An http(s) URL that accepts POSTed JSON.")],
    on: Annotated[
        str, typer.Option("--on", help="Statuses to notify, comma-separated.")
    ] = "succeeded,failed,stopped",
    project: Annotated[
        str | None, typer.Option("--project", help="Only runs of this project.")
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Add a webhook; its signing secret is printed this once. A lab server refuses URLs that
    reach private or loopback addresses unless its admin allows them.

    Example: sf notify add https://hooks.example.com/sf --on failed,stopped --project lab
    """
    from starforge.cli.connect import request
    from starforge.client import labops

    events = [e.strip() for e in on.split(",") if e.strip()]
    made = request(json_out, lambda client: labops.add_endpoint(client, url, events, project))
    out.success(f"webhook {made.id} added: {escape(made.url)} on {', '.join(made.events)}")
    out.line(f"secret (shown once; verify X-StarForge-Signature with it): {made.secret}")


@app.command("ls")
def ls(json_out: JsonOpt = False) -> None:
    """List your webhooks (never their secrets)."""
    from starforge.cli.connect import request
    from starforge.client import labops

    found = request(json_out, labops.endpoints)
    if not found.endpoints:
        out.line("no webhooks: `sf notify add URL` adds one")
        return
    out.table(
        ["ID", "URL", "ON", "PROJECT", "DELIVERED", "FAILING"],
        [
            [e.id, escape(e.url), ",".join(e.events), e.project or "-", str(e.delivered),
             str(e.failing)]
            for e in found.endpoints
        ],
    )  # fmt: skip


@app.command("rm")
def rm(endpoint_id: Annotated[str, typer.Argument(help="The webhook's id.")]) -> None:
    """Remove a webhook (payloads it was still owed are dropped)."""
    from starforge.cli.connect import connect
    from starforge.client import labops
    from starforge.contract.errors import NotFound

    with connect() as client:
        found = labops.remove_endpoint(client, endpoint_id)
    if not found.removed:
        raise NotFound(f"no webhook {endpoint_id} of yours", hint="`sf notify ls` lists them")
    out.success(f"webhook {endpoint_id} removed")


@app.command("log")
def log(
    endpoint_id: Annotated[
        str | None, typer.Argument(help="One webhook (default: all yours).")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", "-n", help="How many tries, newest first.")] = 50,
    json_out: JsonOpt = False,
) -> None:
    """Show delivery tries: when, which run and status, the HTTP answer or the error."""
    from starforge.cli.connect import request
    from starforge.client import labops

    found = request(json_out, lambda client: labops.deliveries(client, endpoint_id, limit))
    out.table(
        ["AT", "WEBHOOK", "RUN", "EVENT", "RESULT"],
        [
            [str(d.at), d.endpoint_id, d.run_id, d.event,
             "ok " + str(d.status_code) if d.ok else escape(d.error or "failed")]
            for d in found.deliveries
        ],
    )  # fmt: skip
