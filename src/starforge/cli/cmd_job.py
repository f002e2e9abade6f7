"""``sf job ls|status|logs|stop|pause|resume|retry|rerun``: follow and control runs. A run id
may be any unambiguous prefix; no id means the latest run (for ``logs`` and ``status``). Actions
answer accepted or not-with-the-reason (exit 0 either way: a rejection is information, not an
error). ``rerun`` (:mod:`starforge.cli.cmd_rerun`) makes a new run from a run's record."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from starforge.cli import cmd_rerun
from starforge.cli.output import JsonOpt, ago, cost_text, figure, out, status_text

# Command modules import the client lazily, inside each command: `sf --help` stays fast.
if TYPE_CHECKING:
    from starforge.client.http import Client
    from starforge.contract.api import GateView, RunView

app = typer.Typer(help="Follow and control runs.", no_args_is_help=True)


def run_ref(value: str | None) -> str | None:
    """An empty run id is a usage error here, not a request for every run on the server."""
    if value is not None and not value.strip():
        raise typer.BadParameter("a run id cannot be empty; give a run id or a prefix of one")
    return value


RunArg = Annotated[
    str | None,
    typer.Argument(
        help="Run id or any unambiguous prefix (default: your latest run).", callback=run_ref
    ),
]
RequiredRunArg = Annotated[
    str, typer.Argument(help="Run id or unambiguous prefix.", callback=run_ref)
]


def resolve(client: Client, ref: str | None) -> RunView:
    from starforge.contract.errors import RunNotFound

    if ref:
        return client.get_run(ref)
    runs = client.list_runs(limit=1).runs
    if not runs:
        raise RunNotFound("you have no runs yet", hint="submit one with `sf submit EXP ...`")
    return client.get_run(runs[0].run_id)


LS_LIMIT = 20  # rows of `sf job ls` (one page)


@app.command("ls")
def list_runs(
    limit: Annotated[int, typer.Option("--limit", "-n", help="How many runs to show.")] = LS_LIMIT,
    status: Annotated[
        str | None, typer.Option("--status", help="Only runs in this status.")
    ] = None,
    steps: Annotated[
        bool,
        typer.Option("--steps", help="List step runs (--then export, eval) as rows too."),
    ] = False,
    json_out: JsonOpt = False,
    sweep: Annotated[
        str | None, typer.Option("--sweep", help="Only the variants of this sweep (grid order).")
    ] = None,
    before: Annotated[
        str | None,
        typer.Option(
            "--before", help="The next page: runs older than this run (the id the hint names)."
        ),
    ] = None,
    wide: Annotated[
        bool, typer.Option("--wide", help="Add each run's GPU-hours (GPU-H) and cost.")
    ] = False,
) -> None:
    """List your runs, newest first, a page at a time (the hint under the table names the next
    page). STEPS is a pipeline's steps done/total (``!``: it stopped short: a step failed or was
    stopped, or an eval gate failed).

    Example: sf job ls --status running · sf job ls --steps · sf job ls --before r-7f3a
    """
    from rich.markup import escape

    from starforge.cli.connect import connect

    if sweep and before:
        raise typer.BadParameter("a sweep is listed whole; drop --before", param_hint="--before")
    out.set_json(json_out)
    more: str | None = None
    with connect() as client:
        if sweep:
            runs = client.sweep_runs(sweep).runs
            runs = [r for r in runs if status is None or r.status == status][:limit]
        else:
            listed = client.list_runs(
                limit=limit, status=status, hide_steps=not steps, before=before
            )
            runs, more = listed.runs, listed.next_before
    out.data(
        [
            {**r.model_dump(mode="json", exclude={"spec", "events"}), "steps_done": _steps(r)}
            for r in runs
        ]
    )
    if not runs:
        filters = [f"--{k} {v}" for k, v in (("status", status), ("sweep", sweep)) if v]
        out.line(f"no run matches {' '.join(filters)}" if filters else "no runs yet")
        return
    columns = ["RUN", "STATUS", "EXPERIMENT", "METHOD", "GPUS", "STEPS", "SUBMITTED", "REASON"]
    rows = [
        [
            r.run_id,
            status_text(r.status) + (f" #{r.queue_position}" if r.queue_position else ""),
            f"{r.project}/{r.experiment}",
            r.method + (f" > {r.step.action}" if r.step else ""),
            str(r.gpus),
            _steps(r) or "-",
            ago(r.created_at),
            escape(
                " ".join(r.reason.split())  # one line: the whole text is in `sf job status`
                + (f" (Slurm: {r.executor_pending})" if r.executor_pending else "")
            ),
        ]
        for r in runs
    ]
    if wide:  # before REASON, which is cut to the width left
        priced = any(r.cost is not None for r in runs)
        columns[-1:-1] = ["GPU-H", "COST"] if priced else ["GPU-H"]
        for r, row in zip(runs, rows, strict=True):
            money = f"{figure(r.cost)} {r.currency}".strip() if r.cost is not None else "-"
            row[-1:-1] = [figure(r.gpu_hours), money] if priced else [figure(r.gpu_hours)]
    # run ids, names and counts whole; the reason on one line
    out.table(columns, rows, cut=("REASON",))
    if more:
        again = [f"--limit {limit}"] if limit != LS_LIMIT else []
        again += [f"--status {status}"] if status else []
        again += ["--steps"] if steps else []
        out.info(f"[dim]older runs: sf job ls {' '.join([*again, '--before', more])}[/dim]")


def _steps(view: RunView) -> str:
    """``done/total`` of a run's pipeline (``!`` when short); a step run: its place in it."""
    from starforge.contract.steps import progress

    if view.step is not None:
        return f"{view.step.action} of {view.step.root_run_id}"
    statuses = [s.status.value if s.status else None for s in view.steps]
    return progress(view.status.value, statuses)


@app.command()
def status(run: RunArg = None, json_out: JsonOpt = False) -> None:
    """Show a run: status and why, resources, provenance, attempts.

    Example: sf job status r-7f3a
    """
    from rich.markup import escape

    from starforge.cli.connect import connect

    out.set_json(json_out)
    with connect() as client:
        view = resolve(client, run)
        console_url = client.console_url(view.run_id)
    observability_url = view.spec.observability_url if view.spec else ""
    out.data({**view.model_dump(mode="json"), "console_url": console_url})
    end = f" ({view.end_reason}, exit code {view.exit_code})" if view.end_reason else ""
    pools = ", ".join(
        f"{p.name}: {p.nodes} x {p.gpus_per_node} {p.series}"
        + (
            f" ({p.procs_per_node} processes per node)"
            if p.procs_per_node != p.gpus_per_node
            else ""
        )
        for p in view.pools
    )
    rows = [
        ("run", view.run_id),
        ("experiment", f"{view.project}/{view.experiment}"),
        ("method", view.method),
        ("status", status_text(view.status) + end),
        ("reason", escape(view.reason) or "-"),
        ("profile", " ".join(view.profiles)),
        ("pools", pools or "-"),
        ("image", f"{view.image} ({view.image_source})" if view.image else "-"),
        ("commit", view.git_commit + (" (dirty)" if view.git_dirty else "")),
        ("submitted", ago(view.created_at)),
        ("started", ago(view.started_at)),
        ("ended", ago(view.ended_at)),
        ("retries", _retries(view)),
        ("cost", _cost(view)),
        ("run dir", view.run_dir or "-"),
        ("curves", f"{observability_url} (external)" if observability_url else "on the platform"),
        ("console", console_url),
    ]
    at = [key for key, _ in rows].index("reason") + 1
    rows[at:at] = _pending_rows(view)  # a queued run: its place in the queue, in numbers
    if view.rerun_of:  # `sf job rerun`: the run it was made from
        rows.insert([key for key, _ in rows].index("commit") + 1, ("rerun of", view.rerun_of))
    if view.spec is not None and view.spec.init_from is not None:  # --init-from: its parent
        after = [key for key, _ in rows].index("commit") + 1
        rows.insert(after, ("lineage", f"started from {view.spec.init_from.describe()}"))
    if view.executor_pending:  # placed, but the executor (Slurm) has not started it yet
        rows.insert(at, ("executor", f"waiting: {view.executor_pending}"))
    if view.steps:
        rows.insert(at, ("steps", _steps(view) + " done"))
    if view.step is not None:
        rows.insert(at, ("step", f"{view.step.action} of run {view.step.root_run_id}"))
    if view.gate is not None:
        rows.insert(at, ("gate", escape(_gate(view.gate))))
    for key, ref in view.datasets.items():  # the exact versions admission resolved
        rows.insert([k for k, _ in rows].index("commit"), (key.replace("_", " "), ref))
    for key, value in rows:
        out.line(f"[bold]{key:>10}[/bold]  {value}")
    if view.steps:
        out.line("")
        out.table(
            ["STEP", "ACTION", "RUN", "STATUS", "REASON", "LOG"],
            [
                [
                    str(s.position + 1),
                    s.action,
                    s.run_id or "-",
                    status_text(s.status) if s.status else "not started",
                    escape(s.reason) or "-",
                    f"sf job logs {s.run_id}" if s.run_id else "-",
                ]
                for s in view.steps
            ],
        )
    if view.attempts:
        out.line("")
        out.table(
            ["ATTEMPT", "EXECUTOR", "STARTED", "ENDED", "EXIT", "REASON", "FROM", "LOG"],
            [
                [
                    str(a.number),
                    a.executor_ref or "-",
                    ago(a.started_at),
                    ago(a.ended_at),
                    "-" if a.exit_code is None else str(a.exit_code),
                    a.end_reason or "-",
                    a.resumed_from.rsplit("/", 1)[-1] if a.resumed_from else "-",
                    a.log_path,
                ]
                for a in view.attempts
            ],
        )


def _cost(view: RunView) -> str:
    """``3.20 GPU-hours (2 attempts: 1.20, 2.00) ≈ 9.60 USD``: GPUs × wall time of every
    attempt, each attempt's in order (the attempts table below stays narrow enough to read)."""
    n = len(view.attempts)
    each = ", ".join(figure(a.gpu_hours) for a in view.attempts) if n > 1 else ""
    note = f"{n} attempt{'s' * (n != 1)}" + (f": {each}" if each else "")
    return cost_text(view.gpu_hours, view.cost, view.currency, note)


def _gate(gate: GateView) -> str:
    """``loss <= 0.001: failed, loss = 2.31 (eval r-...)``: the bound, the verdict, the value."""
    sign = ">=" if gate.bound == "min" else "<="
    verdict = {True: "passed", False: "failed", None: "not judged yet"}[gate.passed]
    value = f", {gate.metric} = {gate.value:.6g}" if gate.value is not None else ""
    return f"{gate.metric} {sign} {gate.threshold:g}: {verdict}{value} (eval {gate.run_id})"


def _pending_rows(view: RunView) -> list[tuple[str, str]]:
    from rich.markup import escape

    p = view.pending
    if p is None:
        return []
    rows = [("queue", f"position {p.position} of {p.queued}")]
    if p.detail and p.detail != p.message:
        rows.append(("numbers", escape(p.detail)))
    if p.next_event:
        rows.append(("starts", escape(p.next_event)))
    if p.reserved_nodes:
        rows.append(("reserved", f"{', '.join(p.reserved_nodes)} kept for this run"))
    return rows


def _retries(view: RunView) -> str:
    limit = "?" if view.max_retries is None else str(view.max_retries)
    return f"{view.auto_retries} of {limit} automatic retries used (after a lost node)"


@app.command()
def logs(
    run: RunArg = None,
    lines: Annotated[
        int,
        typer.Option(
            "-n",
            "--tail",
            help="Lines of history to print first (of each node); 0 prints every attempt's "
            "whole log.",
        ),
    ] = 2000,
    no_follow: Annotated[
        bool,
        typer.Option("--no-follow", help="Print and exit instead of following until the run ends."),
    ] = False,
    node: Annotated[
        int | None,
        typer.Option(
            "--node",
            min=0,
            metavar="RANK",
            help="Only this node's log (0 is the first), unlabelled. Default: every node's, "
            "each line of node r > 0 labelled \\[node r].",
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Print a run's log and follow it until the run ends.

    A run on several nodes shows every node's lines, each line of node r > 0 labelled
    \\[node r] (e.g. "\\[node 1] NCCL error: ..."); --node R shows node R's alone.

    Examples: sf job logs · sf job logs r-7f3a -n 0 --no-follow · sf job logs r-7f3a --node 1
    """
    from starforge.cli import logs as log_view
    from starforge.cli.connect import connect

    out.set_json(json_out)
    with connect() as client:
        view = resolve(client, run)
        if json_out:
            out.data(_logs_json(client, view, node))
            return
        final = log_view.tail_and_follow(client, view, lines, follow=not no_follow, node=node)
    if not no_follow:
        out.info(f"run {view.run_id} {status_text(final)}")


def _logs_json(client: Client, view: RunView, node: int | None) -> dict[str, object]:
    """Every attempt's log: ``log`` as ``sf job logs -n 0`` prints it (every node's, labelled,
    or ``node``'s), and ``nodes``: each node's own text, unlabelled."""
    from starforge.cli.logtail import node_texts, read_attempt
    from starforge.contract.logcursor import merge

    attempts = []
    for a in view.attempts:
        if node is None:
            texts = dict(enumerate(node_texts(client, view.run_id, a.number)))
            log = merge(list(texts.values()))
        else:
            texts = {node: read_attempt(client, view.run_id, a.number, node=node)[0]}
            log = texts[node]
        nodes = [{"node": r, "log": t} for r, t in texts.items()]
        attempts.append({"attempt": a.number, "log": log, "nodes": nodes})
    return {"run_id": view.run_id, "status": view.status, "attempts": attempts}


@app.command()
def stop(
    run: RequiredRunArg,
    json_out: JsonOpt = False,
) -> None:
    """Stop a run: SIGTERM to its processes, SIGKILL after a grace period. Works on queued runs.

    Example: sf job stop r-7f3a
    """
    from starforge.cli.connect import connect

    out.set_json(json_out)
    with connect() as client:
        view = _current_step(client, client.get_run(run))
        result = client.stop(view.run_id)
    out.data({"run_id": view.run_id, **result.model_dump(mode="json")})
    if result.accepted:
        out.success(f"{view.run_id}: {result.message or 'stopping'} ({status_text(result.status)})")
    else:
        out.line(f"[yellow]not stopped:[/yellow] {result.message}")


def _current_step(client: Client, view: RunView) -> RunView:
    """The run an action on ``view`` is for: once training succeeded, its latest step (stop,
    pause and retry act on the pipeline's current step; retrying an export never retrains)."""
    made = [s for s in view.steps if s.run_id]
    if view.status.value != "succeeded" or not made:
        return view
    out.info(f"{view.run_id} succeeded; acting on its current step, {made[-1].action}")
    return client.get_run(made[-1].run_id)


def _act(run: str, action: str, json_out: bool) -> None:
    """Send one user action and print its answer (accepted, or the reason it was not)."""
    from starforge.cli.connect import connect

    out.set_json(json_out)
    with connect() as client:
        view = _current_step(client, client.get_run(run))
        result = getattr(client, action)(view.run_id)
    out.data({"run_id": view.run_id, "action": action, **result.model_dump(mode="json")})
    if result.accepted:
        out.success(f"{result.message} ({status_text(result.status)})")
    else:
        done = {"pause": "paused", "resume": "resumed", "retry": "retried"}[action]
        out.line(f"[yellow]not {done}:[/yellow] {result.message}")


def _action_command(action: str, help_text: str) -> None:
    """Register ``sf job ACTION RUN``: the same command for each action but its help."""

    def command(run: RequiredRunArg, json_out: JsonOpt = False) -> None:
        _act(run, action, json_out)

    app.command(name=action, help=help_text)(command)


for _action, _help in (
    (
        "pause",
        """Pause a run: its training saves a checkpoint and exits, its GPUs are released.

    A queued run is held instead. `sf job resume` continues it from the checkpoint.

    Example: sf job pause r-7f3a
    """,
    ),
    (
        "resume",
        """Resume a paused run: same run id, a new attempt, from its latest checkpoint.

    Example: sf job resume r-7f3a
    """,
    ),
    (
        "retry",
        """Requeue a failed or stopped run: same run id, a new attempt, from its latest checkpoint.

    Example: sf job retry r-7f3a
    """,
    ),
):
    _action_command(_action, _help)

app.command(name="rerun")(cmd_rerun.rerun)
