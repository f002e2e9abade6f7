"""``sf dataset push|ls|show|visibility``: platform datasets, ``OWNER/NAME@VERSION``.

``push`` hashes every file of a folder (the packer's sensitive-file policy applies, by name and
content, and refuses the whole push), asks the server which blobs it lacks, uploads only those
(the same content-addressed store as job packages) and commits the version. A version is
immutable: pushing the same files again says so and uploads nothing; other files under an
existing version are refused before a byte is uploaded. The upload is a job package's
(:mod:`starforge.client.uploads`): small files many to a request, big ones streamed one each.
"""

from __future__ import annotations

import hashlib
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from starforge.cli.output import JsonOpt, ago, human_bytes, out

if TYPE_CHECKING:
    from collections.abc import Callable

    from starforge.client.http import Client
    from starforge.contract.datasets import DatasetVersionView
    from starforge.contract.jobspec import Manifest

app = typer.Typer(
    help="Platform datasets: push a folder as OWNER/NAME@VERSION once, use it from any run.",
    no_args_is_help=True,
)


@dataclass
class Pushed:
    ref: str
    created: bool
    files: int
    files_uploaded: int
    bytes_uploaded: int
    bytes_skipped: int
    total_bytes: int


def scan(folder: Path, keep: dict[str, bytes] | None = None) -> Manifest:
    """Every file under ``folder`` hashed into a manifest; refused when the folder is empty, holds
    a link, or holds anything the packer's sensitive-file policy refuses. ``keep``: filled with
    the small files' content as hashed (by sha256), which the upload then sends from memory."""
    from starforge.contract.errors import InputNotFound, UsageError
    from starforge.project import packer

    if not folder.is_dir():
        raise InputNotFound(
            f"{folder}: no such folder", hint="give the folder that holds the dataset's files"
        )
    paths = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if not p.is_dir())
    if not paths:
        raise UsageError(f"{folder} is empty: nothing to push", hint="put the files in it first")
    manifest = packer.build_manifest(folder, paths, keep=keep)
    links = [f.path for f in manifest.files if f.symlink is not None]
    if links:
        raise UsageError(
            f"a dataset holds plain files only; links in {folder}: {', '.join(links[:5])}",
            hint="replace each link with the file itself",
        )
    return manifest


def _existing(client: Client, owner: str, name: str, version: str) -> DatasetVersionView | None:
    from starforge.client import datasets as api
    from starforge.contract.datasets import DatasetRef
    from starforge.contract.errors import DatasetNotFound

    try:
        return api.show(client, DatasetRef(owner=owner, name=name, version=version))
    except DatasetNotFound:
        return None


def push_folder(
    client: Client,
    name: str,
    version: str,
    folder: Path,
    *,
    public: bool = False,
    readme: str = "",
    on_start: Callable[[int, int], None] | None = None,
    on_progress: Callable[[int], None] | None = None,
    scanned: Manifest | None = None,
    contents: dict[str, bytes] | None = None,
) -> Pushed:
    """Push ``folder`` as the caller's ``name@version``; see the module's docstring.

    ``scanned``: the folder's manifest when the caller has already hashed it (:func:`scan`),
    ``contents`` what that scan kept."""
    from starforge.client import datasets as api
    from starforge.client import uploads
    from starforge.contract.datasets import DatasetPush, manifest_bytes, parse_ref
    from starforge.contract.errors import DatasetVersionExists

    owner = client.whoami().user
    parse_ref(f"{owner}/{name}@{version}", "sf dataset push")  # a malformed name: exit 2
    kept: dict[str, bytes] = {} if contents is None else contents
    manifest = scanned or scan(folder, kept)
    ref = f"{owner}/{name}@{version}"
    unique = {f.sha256: f for f in manifest.files}
    total = sum(f.size for f in unique.values())
    existing = _existing(client, owner, name, version)
    if existing is not None:
        if existing.manifest_sha256 != hashlib.sha256(manifest_bytes(manifest.files)).hexdigest():
            raise DatasetVersionExists(
                f"{ref} exists with other files; a version never changes once pushed",
                hint=f"push the new files as another version (`sf dataset push {name} VERSION "
                f"{folder}`)",
            )
        return Pushed(ref, False, len(manifest.files), 0, 0, total, total)
    todo = [unique[d] for d in sorted(client.missing_blobs(sorted(unique)))]
    todo_bytes = sum(f.size for f in todo)
    if on_start:
        on_start(len(todo), todo_bytes)
    # The same batches as a job's package (many small files to a request, big ones streamed).
    uploads.upload_files(client, folder, todo, on_progress, kept)
    body = DatasetPush(
        name=name, version=version, files=manifest.files, public=public, readme=readme
    )
    result = api.push(client, body)
    return Pushed(
        result.ref, result.created, len(manifest.files), len(todo), todo_bytes,
        total - todo_bytes, total,
    )  # fmt: skip


def _progress_bar(stack: ExitStack, json_out: bool) -> tuple[Any, Any]:
    state: dict[str, Any] = {}

    def started(files: int, size: int) -> None:
        if json_out or files == 0:
            return
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn

        bar = stack.enter_context(
            Progress(
                TextColumn("uploading {task.fields[files]} file(s)"),
                BarColumn(),
                DownloadColumn(),
                transient=True,
                console=out.stderr,
            )
        )
        state["bar"], state["task"] = bar, bar.add_task("upload", total=size, files=files)

    def advanced(n: int) -> None:
        if "bar" in state:
            state["bar"].advance(state["task"], n)

    return started, advanced


@app.command("push")
def push(
    name: Annotated[str, typer.Argument(help="Dataset name (yours: OWNER is you).")],
    version: Annotated[str, typer.Argument(help="Version, e.g. v1; immutable once pushed.")],
    folder: Annotated[Path, typer.Argument(help="The folder whose files are the dataset.")],
    public: Annotated[
        bool, typer.Option("--public", help="Readable by every user (default: you only).")
    ] = False,
    readme: Annotated[
        Path | None, typer.Option("--readme", help="A file whose text is the dataset's card.")
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Push a folder as OWNER/NAME@VERSION; only files the server lacks are uploaded.

    Example: sf dataset push gsm8k-zh v2 data/gsm8k-zh --readme data/gsm8k-zh.md
    """
    from starforge.cli.connect import connect
    from starforge.contract.datasets import parse_ref
    from starforge.contract.errors import InputNotFound

    out.set_json(json_out)
    parse_ref(f"you/{name}@{version}", "sf dataset push")  # malformed: exit 2, no server asked
    kept: dict[str, bytes] = {}
    manifest = scan(folder, kept)  # empty, or a secret in it: refused before a server is asked
    card = ""
    if readme is not None:
        try:
            card = readme.read_text(encoding="utf-8")
        except OSError as exc:
            raise InputNotFound(f"--readme {readme}: {exc.strerror or exc}") from None
    with connect() as client, ExitStack() as stack:
        started, advanced = _progress_bar(stack, json_out)
        done = push_folder(
            client, name, version, folder, public=public, readme=card,
            on_start=started, on_progress=advanced, scanned=manifest, contents=kept,
        )  # fmt: skip
    out.data(done.__dict__)
    if not done.created:
        out.info(f"{done.ref} already holds these {done.files} file(s): nothing uploaded")
        return
    out.success(
        f"pushed {done.ref}: {done.files} file(s), {human_bytes(done.total_bytes)} "
        f"(uploaded {human_bytes(done.bytes_uploaded)}, {human_bytes(done.bytes_skipped)} "
        "already on the server)"
    )


@app.command("ls")
def ls(
    ref: Annotated[
        str | None, typer.Argument(help="OWNER/NAME (or NAME: yours) to list its versions.")
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """List the dataset versions you may read (yours and the public ones).

    Example: sf dataset ls alice/gsm8k-zh
    """
    from starforge.cli.connect import connect
    from starforge.client import datasets as api

    out.set_json(json_out)
    with connect() as client:
        found = api.list_versions(client, ref)
    out.data([v.model_dump(mode="json", exclude={"files", "readme"}) for v in found.versions])
    if not found.versions:
        out.info("no datasets" + (f" match {ref}" if ref else " yet (`sf dataset push`)"))
        return
    out.table(
        ["DATASET", "FILES", "SIZE", "CREATED", "VISIBILITY"],
        [
            [
                escape(v.ref),
                str(v.file_count),
                human_bytes(v.total_bytes),
                ago(v.created_at),
                "public" if v.public else "private",
            ]
            for v in found.versions
        ],
    )


@app.command("show")
def show(
    ref: Annotated[str, typer.Argument(help="OWNER/NAME@VERSION (latest without @VERSION).")],
    json_out: JsonOpt = False,
) -> None:
    """Show one version: its files (size, sha256) and its card.

    Example: sf dataset show alice/gsm8k-zh@v2
    """
    from starforge.cli.connect import connect
    from starforge.client import datasets as api
    from starforge.contract.datasets import parse_ref

    out.set_json(json_out)
    parse_ref(ref, "sf dataset show", owner="you")  # a malformed one starts no server
    with connect() as client:
        parsed = parse_ref(ref, "sf dataset show", owner=client.whoami().user)
        if not parsed.version:
            versions = api.list_versions(client, str(parsed)).versions
            parsed.version = versions[0].version if versions else "-"
        view = api.show(client, parsed)
    out.data(view.model_dump(mode="json"))
    visibility = "public" if view.public else "private"
    out.line(
        f"[bold]{escape(view.ref)}[/bold]  {view.file_count} file(s), "
        f"{human_bytes(view.total_bytes)}, {visibility}, created {ago(view.created_at)}"
    )
    out.table(
        ["FILE", "SIZE", "SHA256"],
        [[escape(f.path), human_bytes(f.size), f.sha256] for f in view.files],
    )
    if view.readme:
        out.line("")
        out.line(escape(view.readme.rstrip()))


@app.command("visibility")
def visibility(
    ref: Annotated[str, typer.Argument(help="OWNER/NAME (or NAME: yours).")],
    public: Annotated[
        bool | None,
        typer.Option("--public/--private", help="Readable by everyone, or by you only."),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Make one of your datasets public or private (all its versions).

    Example: sf dataset visibility gsm8k-zh --public
    """
    from starforge.cli.connect import connect
    from starforge.client import datasets as api
    from starforge.contract.datasets import parse_ref
    from starforge.contract.errors import UsageError

    out.set_json(json_out)
    if public is None:
        raise UsageError("say --public or --private", hint=f"sf dataset visibility {ref} --public")
    with connect() as client:
        parsed = parse_ref(ref, "sf dataset visibility", owner=client.whoami().user)
        if parsed.version:
            raise UsageError(
                f"{ref}: visibility is per dataset, not per version",
                hint=f"sf dataset visibility {parsed.owner}/{parsed.name} --public",
            )
        found = api.set_visibility(client, parsed.owner, parsed.name, public)
    out.data([v.model_dump(mode="json", exclude={"files", "readme"}) for v in found.versions])
    out.success(f"{parsed.owner}/{parsed.name} is now {'public' if public else 'private'}")
