"""``sf submit``: validate locally, pack, upload what the server lacks, have it admit the run."""

from __future__ import annotations

from contextlib import ExitStack
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from starforge.cli.output import human_bytes, out, status_text

if TYPE_CHECKING:
    from starforge.cli.submit_flow import Prepared
    from starforge.client.http import Client

Flag = typer.Option


def submit(
    experiment: Annotated[str, typer.Argument(help="Experiment name (experiments/NAME).")],
    profile: Annotated[
        list[str],
        Flag(
            "--profile",
            "-p",
            help="Resources: NAME[:GPUS], e.g. h200:1, h200:16 (2 nodes of 8); "
            "repeat with ROLE=NAME[:GPUS] for several pools.",
        ),
    ] = [],  # noqa: B006
    set_: Annotated[
        list[str],
        Flag(
            "--set",
            "-s",
            help="Override a method parameter for this run: KEY=VALUE (repeatable; "
            "typed and checked against the method).",
        ),
    ] = [],  # noqa: B006
    model: Annotated[
        str | None,
        Flag("--model", help="Base model: a hub id, or a folder (relative paths: in the lab)."),
    ] = None,
    train_data: Annotated[
        str | None,
        Flag("--train-data", help="Training data, JSONL or Parquet (relative paths: in the lab)."),
    ] = None,
    validation_data: Annotated[
        str | None, Flag("--validation-data", help="Validation data, JSONL or Parquet.")
    ] = None,
    image: Annotated[
        str | None,
        Flag(
            "--image",
            help="Job image (an OCI reference; a digest must be complete). "
            "Required by custom/custom.",
        ),
    ] = None,
    allow_dirty: Annotated[
        bool,
        Flag("--allow-dirty", help="Submit even with uncommitted changes (recorded in the run)."),
    ] = False,
    no_validate: Annotated[
        bool,
        Flag(
            "--no-validate",
            help="Skip local validation of the config and the framework checks "
            "(the server still refuses what it cannot run).",
        ),
    ] = False,
    upgrade_recipe: Annotated[
        bool,
        Flag(
            "--upgrade-recipe",
            help="Rewrite the experiment's method lock to the current catalog "
            "first (with --framework-version to switch versions).",
        ),
    ] = False,
    framework_version: Annotated[
        str | None,
        Flag(
            "--framework-version",
            help="Framework version to run (with --upgrade-recipe when it differs from the lock).",
        ),
    ] = None,
    observability_url: Annotated[
        str | None,
        Flag(
            "--observability-url",
            help="Where the run's curves live (e.g. a W&B project URL). Required by methods "
            "with external observability (custom/custom by default); refused by the others.",
        ),
    ] = None,
    max_retries: Annotated[
        int | None,
        Flag(
            "--max-retries",
            min=0,
            max=100,
            help="Requeue the run from its latest checkpoint at most this many times after a "
            "lost node (default: the method's policy, 2 for the built-in methods).",
        ),
    ] = None,
    then: Annotated[
        list[str],
        Flag(
            "--then",
            help="After training succeeds, run this platform step (export, eval); repeat "
            "for several, in order. Each step is a run of its own (`sf job ls --steps`).",
        ),
    ] = [],  # noqa: B006
    init_from: Annotated[
        str | None,
        Flag(
            "--init-from",
            help="Start from another run's artifact instead of --model: "
            "run/RUN_ID/checkpoint[@step=N] or run/RUN_ID/export (your runs only).",
        ),
    ] = None,
    dry_run: Annotated[
        bool,
        Flag(
            "--dry-run",
            help="Print the resolved config, the spec and each node's launch plan; submit nothing.",
        ),
    ] = False,
    follow: Annotated[
        bool, Flag("--follow", "-f", help="Follow the run's log until it ends.")
    ] = False,
    json_out: Annotated[bool, Flag("--json", help="Print a JSON document for scripts.")] = False,
    secret: Annotated[
        list[str] | None,
        Flag(
            "--secret",
            help="A secret the job receives at start as the environment variable NAME "
            "(repeatable; `sf secret set NAME` first). Only the name travels with the run.",
        ),
    ] = None,
    train_dataset: Annotated[
        str | None,
        Flag(
            "--train-dataset",
            help="Platform dataset OWNER/NAME[@VERSION] (overrides data.train.dataset); "
            "--train-data is then a path inside it.",
        ),
    ] = None,
    validation_dataset: Annotated[
        str | None,
        Flag(
            "--validation-dataset",
            help="Platform dataset for --validation-data (default: the training dataset).",
        ),
    ] = None,
    output_dataset: Annotated[
        str | None,
        Flag(
            "--output-dataset",
            help="On success, publish the run's $FORGE_DATASET_OUT_DIR as OWNER/NAME@VERSION.",
        ),
    ] = None,
) -> None:
    """Submit an experiment as a run.

    Examples:

      sf submit my-grpo --profile h200:1 --model models/tiny-llama \\
          --train-data data/train.jsonl --validation-data data/val.jsonl -s learning_rate=0.01

      sf submit my-custom --profile h200:16 --image myregistry.io/train:v1 \\
          --observability-url https://wandb.ai/me/my-custom --follow

      sf submit my-verl --profile h200:8 --model Qwen/Qwen3.5-9B \\
          --train-data /shared/gsm8k/train.parquet --validation-data /shared/gsm8k/val.parquet \\
          --dry-run

      sf submit my-dpo --profile h200:1 --init-from run/r-abc123/checkpoint \
          --train-data data/dpo-train.jsonl --validation-data data/dpo-val.jsonl
    """
    # Imported here, not at the top: `sf --help` must not pay for the client and the packer.
    from starforge.cli import submit_flow

    out.set_json(json_out)
    opts = submit_flow.SubmitOptions(
        experiment=experiment,
        profiles=profile,
        model=model,
        train_data=train_data,
        validation_data=validation_data,
        sets=set_,
        image=image,
        allow_dirty=allow_dirty,
        no_validate=no_validate,
        upgrade_recipe=upgrade_recipe,
        framework_version=framework_version,
        observability_url=observability_url,
        max_retries=max_retries,
        secrets=secret or [],
        steps=then,
        init_from=init_from,
        train_dataset=train_dataset,
        validation_dataset=validation_dataset,
        output_dataset=output_dataset,
    )
    with submit_flow.connected(opts) as (client, prepared):
        if dry_run:
            _print_dry_run(prepared, client.whoami().user)
            return
        _submit(client, prepared, follow=follow, json_out=json_out)


def _print_dry_run(prepared: Prepared, user: str) -> None:
    import yaml

    from starforge.cli.dry_run import describe

    plan = describe(prepared, user)
    out.data(plan)
    out.line("[bold]resolved config[/bold]")
    out.line(escape(yaml.safe_dump(plan["config"], sort_keys=True).rstrip() or "{}"))
    out.line("\n[bold]parameters[/bold] " + escape(str(prepared.spec.hyperparams)))
    image = plan["image"]
    shown = f"{image['ref']} ({image['source']})" if image["ref"] else "none"
    out.line(
        "[bold]image[/bold] " + escape(shown + (f"; {image['note']}" if image["note"] else ""))
    )
    out.line("\n[bold]pools[/bold]")
    out.table(
        ["POOL", "ROLES", "SERIES", "NODES", "GPUS/NODE", "PROCESSES/NODE"],
        [
            [
                p["name"],
                ",".join(p["roles"]),
                p["series"],
                str(p["nodes"]),
                str(p["gpus_per_node"]),
                str(p.get("processes_per_node") or max(p["gpus_per_node"], 1)),
            ]
            for p in plan["pools"]
        ],
    )
    for node in plan["plans"]:
        out.line(
            f"\n[bold]node {node['node_rank']}[/bold] (pool {node['pool']}) in "
            f"{escape(node['cwd'])}"
        )
        out.line("  " + escape(" ".join(node["argv"])))
        for path in node["files"]:
            out.line(f"  writes {escape(path)}")
    _print_steps(prepared)
    out.line(
        f"\nnothing submitted (--dry-run); the package has {plan['files']} file(s), "
        f"{human_bytes(plan['bytes'])}"
    )


def _print_steps(prepared: Prepared) -> None:
    """The command each ``--then`` step would run once the one before it succeeded."""
    from starforge.cli.cmd_export import pipeline_argvs

    steps = pipeline_argvs(prepared.spec, prepared.method, prepared.validated.run_config)
    for action, argv in steps:
        out.line(f"\n[bold]then {action}[/bold] (a run of its own, after success)")
        out.line("  " + escape(" ".join(argv)))


def _submit(client: Client, prepared: Prepared, *, follow: bool, json_out: bool) -> None:
    from starforge.cli import logs as log_view
    from starforge.cli import submit_flow

    with ExitStack() as stack:
        progress: Any = None

        def started(files: int, size: int) -> None:
            nonlocal progress
            if json_out or files == 0:
                return
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                Progress,
                TextColumn,
                TransferSpeedColumn,
            )

            bar = stack.enter_context(
                Progress(
                    TextColumn("uploading {task.fields[files]} file(s)"),
                    BarColumn(),
                    DownloadColumn(),
                    TransferSpeedColumn(),
                    transient=True,
                    console=out.stderr,
                )
            )
            progress = (bar, bar.add_task("upload", total=size, files=files))

        def advanced(n: int) -> None:
            if progress is not None:
                progress[0].advance(progress[1], n)

        result = submit_flow.upload_and_submit(client, prepared, started, advanced)
    resp = result.response
    report: dict[str, Any] = {
        "run_id": resp.run_id,
        "status": resp.status,
        "created": resp.created,
        "message": resp.message,
        "queue_position": resp.queue_position,
        "hyperparams": prepared.spec.hyperparams,
        "files_uploaded": result.files_uploaded,
        "bytes_uploaded": result.bytes_uploaded,
        "files_skipped": result.files_skipped,
        "bytes_skipped": result.bytes_skipped,
        "warnings": result.warnings,
        "console_url": client.console_url(resp.run_id),
        "observability_url": prepared.spec.observability_url,
    }
    for warning in resp.warnings:
        out.warn(warning)
    out.success(
        f"submitted [bold]{resp.run_id}[/bold]: {status_text(resp.status)}"
        + (f" ({escape(resp.message)})" if resp.message else "")
    )
    out.line(
        f"  uploaded {result.files_uploaded} file(s), {human_bytes(result.bytes_uploaded)};"
        f" already on the server: {result.files_skipped} file(s), "
        f"{human_bytes(result.bytes_skipped)}"
    )
    out.line(f"  console: {escape(report['console_url'])}")
    if prepared.spec.steps:  # each step is a run of its own, made when the one before succeeds
        out.line(
            f"  then: {' -> '.join(prepared.spec.steps)} after training succeeds "
            f"(`sf job status {resp.run_id}` shows each step)"
        )
    if prepared.spec.observability_url:
        out.line(f"  curves: {escape(prepared.spec.observability_url)} (external)")
    if prepared.spec.secrets:  # names only: the values reach the job at start
        named = ", ".join(f"{s.name} ({s.mount.value})" for s in prepared.spec.secrets)
        out.line(f"  secrets: {escape(named)}")
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
