"""``sf secret set|ls|rm``: the secrets a run may ask for by name (``--secret NAME`` on submit, or
``secrets: [NAME]`` in the experiment's config).

A value is read from a hidden prompt, from standard input when it is not a terminal, or from a
file (``--from-file``); it is never an argument (it would stay in the shell's history and in
``ps``) and is never printed. ``--lab`` (admins) sets one every user's runs may use; a user's own
secret of the same name wins. The job reads a secret as the environment variable of its name, or,
with ``{name: NAME, as: file}`` in the config, from the file whose path is in ``NAME_FILE``.
A name the platform sets for the job (``FORGE_*``, ``PATH``, ``RANK``, ...) is refused here, before
the value is read (``contract.secrets.reserved_why``; the server refuses it too).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from starforge.cli.output import JsonOpt, ago, out

app = typer.Typer(
    help="Secrets your runs receive at start (values never shown).", no_args_is_help=True
)

LabOpt = Annotated[
    bool, typer.Option("--lab", help="The lab-wide secret every user's runs may use (admins).")
]


def read_value(name: str, from_file: Path | None) -> str:
    """The value: the file's content, else stdin when piped, else a hidden prompt."""
    from starforge.contract.errors import UsageError

    if from_file is not None:
        try:
            value = from_file.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"--from-file {from_file}: {exc}") from None
    elif not sys.stdin.isatty():
        value = sys.stdin.read().removesuffix("\n")
    else:
        value = typer.prompt(f"value of {name}", hide_input=True, confirmation_prompt=False)
    if not value:
        raise UsageError(f"secret {name}: the value is empty", hint="pipe it in or use --from-file")
    return value


@app.command("set")
def set_(
    name: Annotated[str, typer.Argument(help="The secret's name, e.g. HF_TOKEN.")],
    from_file: Annotated[
        Path | None, typer.Option("--from-file", help="Read the value from this file.")
    ] = None,
    lab: LabOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Set (or replace) a secret; the value comes from a hidden prompt, stdin or --from-file.

    Example: echo "$TOKEN" | sf secret set HF_TOKEN
    """
    from starforge.cli.connect import connect
    from starforge.client import secrets
    from starforge.contract.errors import InvalidName, UsageError
    from starforge.contract.secrets import check_name, reserved_why

    out.set_json(json_out)
    try:
        check_name(name)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    reserved = reserved_why(name)
    if reserved is not None:  # before the value is read: nothing is asked for, nothing sent
        raise InvalidName(reserved, hint=f"choose a name of your own, e.g. MY_{name}")
    value = read_value(name, from_file)
    with connect() as client:
        info = secrets.set_secret(client, name, value, lab=lab)
    out.data(info.model_dump(mode="json"))
    whose = "lab-wide" if lab else "yours"
    # Escaped whole: `[lower_case]` is a rich tag even though the name alone needs no escape.
    out.success(
        escape(
            f"secret {name} set ({whose}); a run asks for it with `--secret {name}` "
            f"or `secrets: [{name}]` and reads it as ${name}"
        )
    )


@app.command("ls")
def ls(json_out: JsonOpt = False) -> None:
    """List your secrets and the lab's: names, scope and dates, never values.

    Example: sf secret ls
    """
    from starforge.cli.connect import connect
    from starforge.client import secrets

    out.set_json(json_out)
    with connect() as client:
        found = secrets.list_secrets(client).secrets
    out.data([s.model_dump(mode="json") for s in found])
    if not found and not out.json_mode:
        out.line("no secrets; `sf secret set NAME` adds one")
        return
    rows = [
        [s.name, s.scope.value, s.owner or "-", ago(s.created_at), ago(s.updated_at)] for s in found
    ]
    out.table(["NAME", "SCOPE", "OWNER", "CREATED", "UPDATED"], rows)


@app.command("rm")
def rm(
    name: Annotated[str, typer.Argument(help="A name `sf secret ls` lists.")],
    lab: LabOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Remove a secret (runs that ask for it are rejected from then on).

    Example: sf secret rm WANDB_API_KEY
    """
    from starforge.cli.connect import connect
    from starforge.client import secrets
    from starforge.contract.errors import NotFound

    out.set_json(json_out)
    with connect() as client:
        result = secrets.remove_secret(client, name, lab=lab)
    if not result.removed:
        raise NotFound(
            f"no {result.scope.value} secret named {name}",
            hint="`sf secret ls` lists them" + ("" if lab else "; a lab-wide one needs --lab"),
        )
    out.data(result.model_dump(mode="json"))
    out.success(f"secret {escape(name)} removed")
