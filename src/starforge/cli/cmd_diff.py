"""``sf job diff A B [C …]``: what differs between runs, as the server compares them.

The server reads each run as ``sf job status`` would and answers only the keys that differ
(``GET /runs-diff``, :mod:`starforge.contract.diffs`): parameters, the rest of the resolved
config, commit, method, image, dataset versions, profile and inputs. A parameter set with ``-s``
is one ``hyperparams`` row, never also a ``config`` row of the same value.

When the command runs inside the lab and its git repository holds both commits of a two-run
diff whose commits differ, it adds the files changed between them (``git diff --name-only``);
``--json`` then carries them as ``files_changed`` (absent when not known). Registered on the
``sf job`` app by :func:`starforge.cli.app.job_group`.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer

from starforge.cli.output import JsonOpt, out

if TYPE_CHECKING:
    from starforge.contract.diffs import RunDiff

ABSENT = "[dim]-[/dim]"


def shown(value: str | None) -> str:
    """A value as a table cell: a string without its JSON quotes, absent as ``-``."""
    from rich.markup import escape

    if value is None:
        return ABSENT
    decoded = json.loads(value)
    return escape(decoded if isinstance(decoded, str) else value)


def files_changed(diff: RunDiff) -> list[str] | None:
    """The files changed between the two runs' commits, when this lab's repository has both."""
    from starforge.contract.errors import GitError, NotInLab
    from starforge.project import git
    from starforge.project.lab import find_lab

    row = next((r for r in diff.rows if (r.section, r.key) == ("commit", "git_commit")), None)
    if row is None or len(row.values) != 2 or None in row.values:
        return None
    old, new = (json.loads(v) for v in row.values if v is not None)
    try:
        return git.changed_between(find_lab().root, str(old), str(new))
    except (NotInLab, GitError):
        return None


def diff(
    runs: Annotated[
        list[str],
        typer.Argument(help="Two to eight runs: ids or unambiguous prefixes, compared in order."),
    ],
    json_out: JsonOpt = False,
) -> None:
    """Show what differs between runs: parameters, config, commit, method, image, datasets.

    One row per key that differs (SECTION, KEY, then each run's value; - where a run has no such
    key). Inside the lab, a commit difference also lists the files changed between the commits.

    Example: sf job diff r-7f3a r-9c01 · sf job diff r-7f3a r-9c01 --json
    """
    from rich.markup import escape

    from starforge.cli.connect import connect

    out.set_json(json_out)
    with connect() as client:
        found = client.runs_diff(runs)
    changed = files_changed(found)
    document = found.model_dump(mode="json")
    if changed is not None:
        document["files_changed"] = changed
    out.data(document)
    compared = len(found.rows) + found.same
    if not found.rows:
        out.line(f"no difference: the runs agree on all {compared} compared keys")
        return
    out.table(
        ["SECTION", "KEY", *found.runs],
        [[r.section, escape(r.key), *(shown(v) for v in r.values)] for r in found.rows],
        wrap=found.runs,  # long values (a config list, an image digest) wrap, keys stay whole
    )
    out.info(f"[dim]{len(found.rows)} of {compared} compared keys differ[/dim]")
    if changed is not None:
        out.line(f"\n[bold]files changed between the commits[/bold] ({len(changed)})")
        for path in changed:
            out.line(f"  {escape(path)}")
