"""``sf submit``: validate locally, pack, upload what the server lacks, have it admit the run."""

from __future__ import annotations

from contextlib import ExitStack
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from starforge.cli.output import human_bytes, out, status_text

if TYPE_CHECKING:
    from rich.progress import Progress


def submit(
    experiment: Annotated[str, typer.Argument(help="Experiment name (experiments/NAME).")],
    profile: Annotated[
        list[str],
        typer.Option(
            "--profile",
            "-p",
            help="Resources: NAME[:GPUS], e.g. h200:1, h200:16 (2 nodes of 8); "
            "repeat with ROLE=NAME[:GPUS] for several pools.",
        ),
    ] = [],  # noqa: B006
    model: Annotated[
        str | None,
        typer.Option(
            "--model", help="Base model: a hub id, or a folder (relative paths: in the lab)."
        ),
    ] = None,
    train_data: Annotated[
        str | None,
        typer.Option(
            "--train-data", help="Training data, JSONL or Parquet (relative paths: in the lab)."
        ),
    ] = None,
    validation_data: Annotated[
        str | None, typer.Option("--validation-data", help="Validation data, JSONL or Parquet.")
    ] = None,
    allow_dirty: Annotated[
        bool,
        typer.Option(
            "--allow-dirty", help="Submit even with uncommitted changes (recorded in the run)."
        ),
    ] = False,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Follow the run's log until it ends.")
    ] = False,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print a JSON document for scripts.")
    ] = False,
) -> None:
    """Submit an experiment as a run.

    Examples:

      sf submit my-grpo --profile h200:1 --model models/tiny-llama \\
          --train-data data/train.jsonl --validation-data data/val.jsonl

      sf submit my-custom --profile h200:8 --follow
    """
    # Imported here, not at the top: `sf --help` must not pay for the client and the packer.
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    from starforge.cli import logs as log_view
    from starforge.cli import submit_flow
    from starforge.cli.connect import connect

    out.set_json(json_out)
    opts = submit_flow.SubmitOptions(
        experiment=experiment,
        profiles=profile,
        model=model,
        train_data=train_data,
        validation_data=validation_data,
        allow_dirty=allow_dirty,
    )
    prepared = submit_flow.prepare(opts)
    for warning in prepared.warnings:
        out.warn(warning)
    with connect() as client, ExitStack() as stack:
        submit_flow.check_profiles(client, prepared)
        progress: Progress | None = None
        task = None

        def started(files: int, size: int) -> None:
            nonlocal progress, task
            if json_out or files == 0:
                return
            progress = stack.enter_context(
                Progress(
                    TextColumn("uploading {task.fields[files]} file(s)"),
                    BarColumn(),
                    DownloadColumn(),
                    TransferSpeedColumn(),
                    transient=True,
                    console=out.stderr,
                )
            )
            task = progress.add_task("upload", total=size, files=files)

        def advanced(n: int) -> None:
            if progress is not None and task is not None:
                progress.advance(task, n)

        result = submit_flow.upload_and_submit(client, prepared, started, advanced)
        stack.close()
        resp = result.response
        report = {
            "run_id": resp.run_id,
            "status": resp.status,
            "created": resp.created,
            "message": resp.message,
            "queue_position": resp.queue_position,
            "files_uploaded": result.files_uploaded,
            "bytes_uploaded": result.bytes_uploaded,
            "files_skipped": result.files_skipped,
            "bytes_skipped": result.bytes_skipped,
            "warnings": result.warnings,
        }
        for warning in resp.warnings:
            out.warn(warning)
        out.success(
            f"submitted [bold]{resp.run_id}[/bold]: {status_text(resp.status)}"
            + (f" ({escape(resp.message)})" if resp.message else "")
        )
        out.line(
            f"  uploaded {result.files_uploaded} file(s), "
            f"{human_bytes(result.bytes_uploaded)}; already on the server: "
            f"{result.files_skipped} file(s), {human_bytes(result.bytes_skipped)}"
        )
        if not follow:
            out.line(f"  follow it: [bold]sf job logs {resp.run_id}[/bold]")
            out.data(report)
            return
        view = client.get_run(resp.run_id)
        final = (
            log_view.wait_for_end(client, view)
            if json_out
            else log_view.tail_and_follow(client, view, lines=0, follow=True)
        )
    report["status"] = final
    out.data(report)
    out.info(f"run {resp.run_id} {status_text(final)}")
    if final != "succeeded":
        raise typer.Exit(1)
