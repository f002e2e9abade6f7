"""``sf admin user add|ls|set-role|set-unix|disable|enable``, ``sf admin quota show|set``,
``sf admin image default|ls``, ``sf admin registry ...`` (``cli/cmd_registry.py``: the allowlist
and registry logins) and ``sf admin secrets rotate-key``.

Only admins may call these; on the embedded server the local user is the admin. A new user's
first token is printed once (``--json`` gives it as ``token``). A user an admin never set a quota
for follows the server's defaults (``quota_defaults`` in server.yaml).
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from starforge.cli import cmd_registry, cmd_usage
from starforge.cli.cmd_status import quota_rows
from starforge.cli.output import JsonOpt, out

if TYPE_CHECKING:
    from starforge.contract.api import UserQuota
    from starforge.contract.auth import UserView
    from starforge.contract.images import ImageAdmin

app = typer.Typer(help="Administer the control plane (admins only).", no_args_is_help=True)
quota_app = typer.Typer(
    help="Users' quotas: GPUs and runs at once, allowed profiles, priority.",
    no_args_is_help=True,
)
user_app = typer.Typer(
    help="Users and their roles: viewer, member, operator, admin.", no_args_is_help=True
)
image_app = typer.Typer(
    help="Default images per framework (the second rule of the image resolution order).",
    no_args_is_help=True,
)
app.add_typer(user_app, name="user")
app.add_typer(quota_app, name="quota")
app.add_typer(image_app, name="image")
app.add_typer(cmd_registry.app, name="registry")
secrets_app = typer.Typer(help="The key that seals secrets at rest.", no_args_is_help=True)
app.add_typer(secrets_app, name="secrets")
app.add_typer(cmd_usage.app, name="usage")
app.add_typer(cmd_usage.maintenance_app, name="maintenance")
NONE = "none"
_SERIES_LIMIT = re.compile(r"^(?P<series>[A-Za-z0-9][A-Za-z0-9._-]*)=(?P<n>\d+|none)$")


def _user_ref(value: str | None) -> str | None:
    """An empty user name is a usage error, not "every user"."""
    if value is not None and not value.strip():
        raise typer.BadParameter("a user name cannot be empty")
    return value


def _count(text: str, flag: str) -> int | None:
    from starforge.contract.errors import UsageError

    if text.lower() == NONE:
        return None
    if not text.isdigit():
        raise UsageError(
            f"{flag} {text!r}: give a whole number of 0 or more, or 'none' for no limit",
            hint=f"e.g. {flag} 16",
        )
    return int(text)


def parse_max_gpus(values: list[str]) -> dict[str, Any]:
    """``--max-gpus 16`` (all series), ``--max-gpus h200=8`` (one series), ``none`` lifts."""
    from starforge.contract.errors import UsageError

    update: dict[str, Any] = {}
    per_series: dict[str, int | None] = {}
    for value in values:
        match = _SERIES_LIMIT.match(value.strip())
        if match:
            n = match.group("n")
            per_series[match.group("series")] = None if n == NONE else int(n)
        elif "=" in value:
            raise UsageError(
                f"--max-gpus {value!r}: the form is SERIES=N (or SERIES=none)",
                hint="e.g. --max-gpus h200=8",
            )
        else:
            update["max_gpus"] = _count(value.strip(), "--max-gpus")
    if per_series:
        update["max_gpus_per_series"] = per_series
    return update


def _print(found: UserQuota) -> None:
    source = "the server's default" if found.default else "set by an admin"
    out.line(f"[bold]{found.user}[/bold] ({found.role}); quota {source}")
    for label, text in quota_rows(found.quota, found.usage):
        out.line(f"  {label:>8}  {escape(text)}")


@quota_app.command("show")
def show(
    user: Annotated[
        str | None, typer.Argument(help="A user (default: every user).", callback=_user_ref)
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Show quotas beside what each user has in use.

    Examples: sf admin quota show · sf admin quota show alice --json
    """
    from starforge.cli.connect import connect

    out.set_json(json_out)
    with connect() as client:
        found = [client.quota(user)] if user else client.quotas().users
    out.data(
        [q.model_dump(mode="json") for q in found]
        if user is None
        else found[0].model_dump(mode="json")
    )
    for i, q in enumerate(found):
        if i:
            out.line("")
        _print(q)


@quota_app.command("set")
def set_quota(
    user: Annotated[str, typer.Argument(help="The user whose quota changes.", callback=_user_ref)],
    max_gpus: Annotated[
        list[str],
        typer.Option(
            "--max-gpus",
            help="GPUs at once: N for all series together, SERIES=N for one series, "
            "'none' (or SERIES=none) to lift the limit. Repeatable.",
        ),
    ] = [],  # noqa: B006
    max_runs: Annotated[
        str | None,
        typer.Option("--max-runs", help="Runs holding resources at once: N, or 'none'."),
    ] = None,
    allow: Annotated[
        list[str],
        typer.Option(
            "--allow",
            help="A profile the user may ask for (repeatable; replaces the list); "
            "'all' allows every profile.",
        ),
    ] = [],  # noqa: B006
    priority: Annotated[
        int | None,
        typer.Option("--priority", help="Queue priority of the user's runs (higher first)."),
    ] = None,
    reset: Annotated[
        bool,
        typer.Option("--reset", help="Start from the server's defaults (alone: back to them)."),
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Change a user's quota; what you do not name keeps its value.

    Examples:

      sf admin quota set alice --max-gpus 16 --max-gpus h200=8 --max-runs 4

      sf admin quota set bob --allow h100 --priority -1

      sf admin quota set alice --reset
    """
    from starforge.cli.connect import connect
    from starforge.contract.api import QuotaUpdate

    out.set_json(json_out)
    fields: dict[str, Any] = parse_max_gpus(max_gpus)
    if max_runs is not None:
        fields["max_runs"] = _count(max_runs, "--max-runs")
    if allow:
        fields["allowed_profiles"] = None if [a.lower() for a in allow] == ["all"] else allow
    if priority is not None:
        fields["priority"] = priority
    if reset:
        fields["reset"] = True
    if not fields:
        from starforge.contract.errors import UsageError

        raise UsageError(
            "nothing to change",
            hint="give --max-gpus, --max-runs, --allow, --priority or --reset",
        )
    with connect() as client:
        found = client.set_quota(user, QuotaUpdate(**fields))
    out.data(found.model_dump(mode="json"))
    out.success(f"quota of {found.user} updated")
    _print(found)


# ---- users --------------------------------------------------------------------------------------

ROLE_HELP = (
    "viewer (reads), member (submits, acts on own runs), operator (acts on anyone's runs), "
    "admin (also users, quotas, lab settings)"
)


class RoleName(StrEnum):
    viewer = "viewer"
    member = "member"
    operator = "operator"
    admin = "admin"


def _user_row(u: UserView) -> list[str]:
    state = "disabled" if u.disabled else "active"
    return [u.name, u.role.value, state, str(u.tokens), u.unix_user or "-"]


def _unix_user(value: str | None) -> str | None:
    """A Unix account name as useradd takes it (refused here, before anything is sent)."""
    from starforge.contract.auth import UNIX_USER_PATTERN

    if value is not None and not re.fullmatch(UNIX_USER_PATTERN, value):
        raise typer.BadParameter(
            f"{value!r} is not a Unix account name (lower case letters, digits, _ and -, "
            "32 characters at most)"
        )
    return value


@user_app.command("add")
def user_add(
    name: Annotated[str, typer.Argument(help="The new user's name.", callback=_user_ref)],
    role: Annotated[RoleName, typer.Option("--role", help=ROLE_HELP)] = RoleName.member,
    unix_user: Annotated[
        str | None,
        typer.Option(
            "--unix-user",
            help="The Unix account their jobs run under on a Slurm server (see set-unix).",
            callback=_unix_user,
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Add a user; their first token is printed once (give it to them for `sf login`).

    Examples:

      sf admin user add alice

      sf admin user add carol --unix-user carol   (her Slurm jobs run as Unix user carol)

      sf admin user add bob --role viewer --json   (the token is in "token")
    """
    from starforge.cli.connect import connect

    out.set_json(json_out)
    with connect() as client:
        made = client.add_user(name, role.value, unix_user)
    out.data({"token": made.token, **made.user.model_dump(mode="json")})
    out.success(f"user {made.user.name} added ({made.user.role.value}); their token, shown once:")
    out.line(made.token)


@user_app.command("ls")
def user_ls(json_out: JsonOpt = False) -> None:
    """List the users with their role, state and number of live tokens.

    Example: sf admin user ls
    """
    from starforge.cli.connect import connect

    out.set_json(json_out)
    with connect() as client:
        found = client.users().users
    out.data([u.model_dump(mode="json") for u in found])
    out.table(["USER", "ROLE", "STATE", "TOKENS", "UNIX"], [_user_row(u) for u in found])


@user_app.command("set-role")
def user_set_role(
    name: Annotated[str, typer.Argument(help="The user.", callback=_user_ref)],
    role: Annotated[RoleName, typer.Argument(help=ROLE_HELP)],
    json_out: JsonOpt = False,
) -> None:
    """Change a user's role.

    Example: sf admin user set-role alice operator
    """
    from starforge.cli.connect import request

    done = request(json_out, lambda client: client.set_role(name, role.value))
    out.success(f"{done.name} is now {done.role.value}")


@user_app.command("set-unix")
def user_set_unix(
    name: Annotated[str, typer.Argument(help="The user.", callback=_user_ref)],
    unix_user: Annotated[
        str | None,
        typer.Argument(
            help="Their Unix account (it must exist on the server's host).", callback=_unix_user
        ),
    ] = None,
    unset: Annotated[bool, typer.Option("--unset", help="Unmap the user's account.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Map a user to the Unix account their jobs run under on a Slurm server.

    Their runs are submitted as that account (`sbatch --uid/--gid`) and their run folders are
    its own; on a Slurm server of several users an unmapped member's runs are refused.

    Examples:

      sf admin user set-unix alice alice

      sf admin user set-unix alice --unset
    """
    from starforge.cli.connect import request

    if (unix_user is None) == (not unset):
        raise typer.BadParameter("give a Unix account, or --unset (not both)")
    done = request(json_out, lambda client: client.set_unix_user(name, unix_user))
    if done.unix_user:
        out.success(f"{done.name}'s jobs run as Unix user {done.unix_user} on Slurm")
    else:
        out.success(f"{done.name} has no Unix account now")


def _set_disabled(name: str, disabled: bool, json_out: bool) -> None:
    from starforge.cli.connect import request

    done = request(json_out, lambda client: client.set_disabled(name, disabled))
    out.success(f"{done.name} is {'disabled' if done.disabled else 'enabled'}")


@user_app.command("disable")
def user_disable(
    name: Annotated[str, typer.Argument(help="The user.", callback=_user_ref)],
    json_out: JsonOpt = False,
) -> None:
    """Disable a user: their tokens are refused; their runs and history stay.

    Example: sf admin user disable alice
    """
    _set_disabled(name, True, json_out)


@user_app.command("enable")
def user_enable(
    name: Annotated[str, typer.Argument(help="The user.", callback=_user_ref)],
    json_out: JsonOpt = False,
) -> None:
    """Enable a disabled user again.

    Example: sf admin user enable alice
    """
    _set_disabled(name, False, json_out)


# ---- images and registries --------------------------------------------------------------------


def _show_images(found: ImageAdmin) -> None:
    rows = [[fw, ref, "admin"] for fw, ref in sorted(found.defaults.items())]
    rows += [[rid, ref, "server.yaml"] for rid, ref in sorted(found.runtime_images.items())]
    out.table(["FRAMEWORK / RUNTIME", "IMAGE", "SET IN"], rows)
    out.line(f"containers: {found.containers}")


@image_app.command("default")
def image_default(
    framework: Annotated[str, typer.Argument(help="The framework, e.g. trl, verl, nemo-rl.")],
    ref: Annotated[str, typer.Argument(help="The image; '' removes the default.")],
    json_out: JsonOpt = False,
) -> None:
    """Set the image runs of a framework get when they name none (--image still wins).

    Example: sf admin image default trl ghcr.io/my-lab/trl:1.16.0
    """
    from starforge.cli.connect import request

    found = request(json_out, lambda client: client.set_image_default(framework, ref))
    _show_images(found)
    out.success(f"{framework}: {ref or 'no default (the runtime registry or catalog decide)'}")


@image_app.command("ls")
def image_ls(json_out: JsonOpt = False) -> None:
    """List the framework defaults (admins) and the runtime images (server.yaml).

    Example: sf admin image ls
    """
    from starforge.cli.connect import request

    _show_images(request(json_out, lambda client: client.image_settings()))


@secrets_app.command("rotate-key")
def secrets_rotate_key(json_out: JsonOpt = False) -> None:
    """Re-encrypt every secret under a new key, while the server keeps serving.

    With STARFORGE_SECRETS_KEY, put the new key first (comma, then the old), restart the server,
    run this, then drop the old key. Example: sf admin secrets rotate-key
    """
    from starforge.cli.connect import request
    from starforge.client import secrets

    done = request(json_out, secrets.rotate_key)
    retired = f"; retired {', '.join(done.retired)}" if done.retired else ""
    out.success(f"{done.reencrypted} secret(s) re-encrypted under key {done.key_id}{retired}")
