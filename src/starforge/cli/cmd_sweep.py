"""``sf sweep``: run an experiment once per combination of parameter values, ranked, early-stopped.

``sf sweep EXP -g KEY=V1,V2 ...`` is ``sf sweep submit EXP ...``: the submission path of ``sf
submit`` (validation, provenance, ONE pack and upload for every variant), each ``-g`` value typed
and checked like a ``-s`` value, each variant's parameters checked like a submission's (the
framework's static checks too), then one ``POST /sweeps`` that admits all variants or none.
``sf sweep status ID`` ranks the variants by their metric; ``sf sweep stop ID`` stops them.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import click
import typer
from rich.markup import escape
from typer.core import TyperGroup

from starforge.cli.output import human_bytes, out, status_text

if TYPE_CHECKING:
    from starforge.cli.submit_flow import Prepared
    from starforge.contract.sweeps import EarlyStop, SweepView

Flag = typer.Option
JsonOpt = Annotated[bool, Flag("--json", help="Print a JSON document for scripts.")]
SweepArg = Annotated[str, typer.Argument(help="Sweep id (or a unique prefix).")]


class Mode(StrEnum):
    MIN = "min"  # a loss: lower wins
    MAX = "max"  # an accuracy or a reward: higher wins


class _DefaultToSubmit(TyperGroup):
    """``sf sweep EXP ...`` means ``sf sweep submit EXP ...`` unless EXP names a subcommand."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and not args[0].startswith("-") and args[0] not in self.commands:
            args = ["submit", *args]
        return super().parse_args(ctx, args)


app = typer.Typer(
    cls=_DefaultToSubmit,
    no_args_is_help=True,
    help="Sweeps: one run per combination of parameter values, with early stopping (ASHA).\n\n"
    "sf sweep EXP -g learning_rate=1e-5,3e-5 -g seed=1,2,3 --profile h200:1 "
    "--early-stop --stop-metric loss --rungs 100,300 --keep 3",
)


def _early_stop(
    on: bool, metric: str | None, rungs: str | None, keep: int, mode: str
) -> EarlyStop | None:
    from starforge.contract.errors import UsageError
    from starforge.contract.sweeps import EarlyStop

    if not on:
        if metric or rungs:
            raise UsageError(
                "--stop-metric and --rungs apply with --early-stop", hint="add --early-stop"
            )
        return None
    if not metric or not rungs:
        raise UsageError(
            "--early-stop needs --stop-metric KEY and --rungs S1,S2,...",
            hint="e.g. --early-stop --stop-metric loss --rungs 100,300 --keep 3",
        )
    try:
        steps = [int(s) for s in rungs.split(",")]
        return EarlyStop(metric=metric, rungs=steps, keep=keep, mode=mode)  # type: ignore[arg-type]
    except ValueError as exc:
        raise UsageError(
            f"--rungs {rungs}: {exc}".splitlines()[0] + "; rungs are increasing step counts",
            hint="e.g. --rungs 100,300,900",
        ) from None


def plan_variants(
    prepared: Prepared, grid_args: list[str], sets: list[str]
) -> list[dict[str, Any]]:
    """The variants of ``-g`` against the prepared experiment, each one checked like a
    submission of its own (parameters, then the framework's static checks once pools are known)."""
    from starforge.catalog.checks import CheckContext, run_checks
    from starforge.contract import params
    from starforge.contract.submission import check_params
    from starforge.contract.sweeps import check_overlap, expand, parse_grid

    method = prepared.method
    grid = parse_grid(method.params, grid_args)
    check_overlap(grid, {params.split_set(s)[0]: None for s in sets})
    variants = expand(grid)
    for variant in variants:
        merged = {**prepared.spec.hyperparams, **variant}
        check_params(merged, method)
        if prepared.strict and prepared.pools:
            config = params.apply(method.params, prepared.validated.config, merged)
            run_checks(CheckContext(method, config, prepared.pools))
    return variants


@app.command("submit")
def submit(
    experiment: Annotated[str, typer.Argument(help="Experiment name (experiments/NAME).")],
    grid: Annotated[
        list[str],
        Flag("--grid", "-g", help="A swept parameter: KEY=V1,V2,... (repeatable; the product)."),
    ],
    profile: Annotated[
        list[str], Flag("--profile", "-p", help="Resources of each variant, as `sf submit`.")
    ] = [],  # noqa: B006
    set_: Annotated[
        list[str], Flag("--set", "-s", help="A parameter every variant shares: KEY=VALUE.")
    ] = [],  # noqa: B006
    model: Annotated[str | None, Flag("--model", help="Base model, as `sf submit`.")] = None,
    train_data: Annotated[str | None, Flag("--train-data", help="Training data.")] = None,
    validation_data: Annotated[
        str | None, Flag("--validation-data", help="Validation data.")
    ] = None,
    image: Annotated[str | None, Flag("--image", help="Job image (OCI reference).")] = None,
    allow_dirty: Annotated[
        bool, Flag("--allow-dirty", help="Submit even with uncommitted changes.")
    ] = False,
    observability_url: Annotated[
        str | None, Flag("--observability-url", help="Where the curves live (external methods).")
    ] = None,
    dry_run: Annotated[bool, Flag("--dry-run", help="Print the variants; submit nothing.")] = False,
    early_stop: Annotated[
        bool, Flag("--early-stop", help="Stop the variants ASHA rules out at each rung.")
    ] = False,
    stop_metric: Annotated[
        str | None, Flag("--stop-metric", help="The reported metric ASHA ranks by.")
    ] = None,
    rungs: Annotated[
        str | None, Flag("--rungs", help="Step counts where variants are compared: S1,S2,...")
    ] = None,
    keep: Annotated[
        int, Flag("--keep", min=2, max=64, help="Each rung keeps the top 1/N of the variants.")
    ] = 3,
    mode: Annotated[Mode, Flag("--mode", help="Whether a lower or a higher metric wins.")] = "min",  # type: ignore[assignment]
    json_out: JsonOpt = False,
) -> None:
    """Submit a sweep: one run per combination of the -g values (at most 64).

    Example: sf sweep my-sft -g learning_rate=1e-5,3e-5 -g seed=1,2,3 --profile h200:1
    --early-stop --stop-metric loss --rungs 50,150 --keep 2
    """
    from starforge.cli import submit_flow

    out.set_json(json_out)
    rule = _early_stop(early_stop, stop_metric, rungs, keep, Mode(mode).value)
    opts = submit_flow.SubmitOptions(
        experiment=experiment,
        profiles=profile,
        model=model,
        train_data=train_data,
        validation_data=validation_data,
        sets=set_,
        image=image,
        allow_dirty=allow_dirty,
        observability_url=observability_url,
    )
    with submit_flow.connected(opts) as (client, prepared):
        variants = plan_variants(prepared, grid, set_)
        if dry_run:
            _print_plan(prepared, variants, rule)
            return
        _send(client, prepared, variants, rule)


def _print_plan(prepared: Prepared, variants: list[dict[str, Any]], rule: EarlyStop | None) -> None:
    out.data(
        {
            "variants": variants,
            "hyperparams": prepared.spec.hyperparams,
            "early_stop": rule.model_dump() if rule else None,
            "files": len(prepared.manifest.files),
            "bytes": prepared.manifest.total_bytes,
        }
    )
    keys = list(variants[0]) if variants else []
    out.table(["#", *keys], [[str(i), *(str(v[k]) for k in keys)] for i, v in enumerate(variants)])
    if rule:
        out.line(
            f"early stopping on {escape(rule.metric)} ({rule.mode}) at steps "
            f"{', '.join(map(str, rule.rungs))}: each rung keeps the top 1/{rule.keep}"
        )
    out.line(
        f"nothing submitted (--dry-run): {len(variants)} variant(s) of one package of "
        f"{len(prepared.manifest.files)} file(s), {human_bytes(prepared.manifest.total_bytes)}"
    )


def _send(
    client: Any, prepared: Prepared, variants: list[dict[str, Any]], rule: EarlyStop | None
) -> None:
    from starforge.client import pending, uploads
    from starforge.contract.errors import ServerUnreachable, StarForgeError
    from starforge.contract.sweeps import SweepRequest

    by_digest = {f.sha256: f for f in prepared.manifest.files}
    missing = sorted(set(client.missing_blobs(sorted(by_digest))))
    todo = [by_digest[d] for d in missing]  # one upload for every variant, in batches
    uploads.upload_files(client, prepared.root, todo, None, prepared.contents)
    content = {
        "spec": prepared.spec.model_dump(mode="json"),
        "manifest": prepared.manifest.model_dump(mode="json"),
        "variants": variants,
        "early_stop": rule.model_dump(mode="json") if rule else None,
    }
    key = pending.open_pending(content)
    request = SweepRequest(
        spec=prepared.spec,
        manifest=prepared.manifest,
        variants=variants,
        early_stop=rule,
        idempotency_key=key.key,
    )
    try:
        created = client.submit_sweep(request)
    except ServerUnreachable:
        raise  # the record stays: the next try reuses the key
    except StarForgeError:
        key.clear()
        raise
    key.clear()
    out.data({**created.model_dump(mode="json"), "files_uploaded": len(missing)})
    out.success(
        f"submitted sweep [bold]{created.sweep_id}[/bold]: {len(created.runs)} variant(s); "
        f"uploaded {len(missing)} file(s) once for all"
    )
    out.table(
        ["#", "RUN", "STATUS", *variants[0]],
        [
            [str(i), r.run_id, status_text(r.status), *(str(v) for v in variants[i].values())]
            for i, r in enumerate(created.runs)
        ],
    )
    out.line(f"  rank them: [bold]sf sweep status {created.sweep_id}[/bold]")


@app.command("status")
def status(
    sweep: SweepArg,
    metric: Annotated[
        str | None, Flag("--metric", help="Rank by this metric (default: the sweep's).")
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Show a sweep's variants, their parameters and metric, best first.

    Example: sf sweep status s-7f3a
    """
    from starforge.cli.connect import request

    view = request(json_out, lambda client: client.sweep(sweep, metric=metric))
    print_sweep(view)


def print_sweep(view: SweepView) -> None:
    rule = view.early_stop
    head = f"sweep [bold]{view.sweep_id}[/bold] of {view.project}/{view.experiment}"
    if rule:
        head += (
            f"; early stopping on {escape(rule.metric)} ({rule.mode}) at steps "
            f"{', '.join(map(str, rule.rungs))}, keeping 1/{rule.keep}"
        )
    out.line(head)
    keys = list(view.grid)
    metric = view.metric or "METRIC"
    out.table(
        ["RANK", "RUN", "STATUS", *keys, metric.upper(), "STEP", "REASON"],
        [
            [
                str(v.rank) if v.rank else "-",
                v.run_id,
                status_text(v.status),
                *(str(v.params.get(k, "")) for k in keys),
                f"{v.metric:.6g}" if v.metric is not None else "-",
                str(v.step) if v.step is not None else "-",
                escape(v.reason),
            ]
            for v in view.variants
        ],
        wrap=["REASON"],
    )


@app.command("ls")
def list_sweeps(
    limit: Annotated[int, Flag("--limit", "-n", help="How many sweeps to show.")] = 20,
    json_out: JsonOpt = False,
) -> None:
    """List your sweeps, newest first."""
    from starforge.cli.connect import connect

    out.set_json(json_out)
    with connect() as client:
        views = client.list_sweeps(limit=limit).sweeps
    out.data([v.model_dump(mode="json") for v in views])
    if not views:
        out.line("no sweeps yet")
        return
    out.table(
        ["SWEEP", "EXPERIMENT", "VARIANTS", "ACTIVE", "BEST"],
        [
            [
                v.sweep_id,
                f"{v.project}/{v.experiment}",
                str(len(v.variants)),
                str(sum(1 for x in v.variants if not x.status.is_terminal)),
                v.variants[0].run_id if v.variants and v.variants[0].rank else "-",
            ]
            for v in views
        ],
    )


@app.command("stop")
def stop(sweep: SweepArg, json_out: JsonOpt = False) -> None:
    """Stop every variant of a sweep that has not ended.

    Example: sf sweep stop s-7f3a
    """
    from starforge.cli.connect import request

    got = request(json_out, lambda client: client.stop_sweep(sweep))
    for r in got.results:
        out.line(("[green]✓[/green] " if r.accepted else "  ") + escape(r.message))
    if not got.results:
        out.line("every variant of the sweep had already ended")
