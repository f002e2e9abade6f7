"""``sf status``: the profiles you can ask for, the cluster's capacity (or that its executor does
not answer), your quota and usage, and your active, queued (with their place in the queue and why
they wait) and paused runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.markup import escape

from starforge.cli.output import JsonOpt, out, status_text

if TYPE_CHECKING:
    from starforge.contract.api import ClusterStatus, MyUsage, Quota, Usage
    from starforge.contract.labops import MyGpuHours


def _limit(used: int, cap: int | None) -> str:
    return f"{used} of {cap}" if cap is not None else f"{used} in use, no limit"


def quota_rows(quota: Quota, usage: Usage) -> list[tuple[str, str]]:
    """A quota beside what is in use, as (label, text) rows."""
    per_series = [
        f"{series}: {_limit(usage.gpus_by_series.get(series, 0), cap)}"
        for series, cap in sorted(quota.max_gpus_per_series.items())
    ]
    gpus = _limit(usage.gpus, quota.max_gpus)
    if per_series:
        gpus += "; " + "; ".join(per_series)
    allowed = quota.allowed_profiles
    return [
        ("GPUs", gpus),
        ("runs", _limit(usage.runs, quota.max_runs) + f", {usage.queued} queued"),
        ("profiles", "all" if allowed is None else ", ".join(allowed) or "none"),
        ("priority", str(quota.priority)),
    ]


def _print_cluster(cluster: ClusterStatus) -> None:
    out.line("[bold]profiles[/bold] (--profile NAME[:GPUS]; above one node, whole nodes)")
    rows = []
    for p in cluster.profiles:
        nodes = sum(1 for n in cluster.nodes if n.series == p.series and n.gpus >= p.gpus_per_node)
        largest = f"{p.name}:{nodes * p.gpus_per_node}" if nodes else "none fits here"
        procs = str(p.processes_per_node) if p.processes_per_node else "1 per GPU"
        rows.append(
            [
                p.name,
                p.series,
                str(p.gpus_per_node),
                procs,
                f"{p.nodes} x {p.gpus_per_node}",
                largest,
            ]
        )
    out.table(["NAME", "SERIES", "GPUS/NODE", "PROCESSES/NODE", "DEFAULT", "LARGEST HERE"], rows)
    out.line(f"\n[bold]capacity[/bold] (executor {cluster.executor})")
    if cluster.unreachable:  # the tables below are the last known, not now
        out.line(f"[red]{escape(cluster.unreachable)}[/red]")
    out.table(
        ["SERIES", "NODES", "TOTAL", "USED", "FREE"],
        [[s.series, str(s.nodes), str(s.total), str(s.used), str(s.free)] for s in cluster.series],
    )
    out.line("")
    out.table(
        ["NODE", "SERIES", "GPUS", "USED", "FREE", "RUNS"],
        [
            [n.name, n.series, str(n.gpus), str(n.used), str(n.free), ", ".join(n.runs) or "-"]
            for n in cluster.nodes
        ],
    )
    out.line(f"\n{cluster.active} run(s) active, {cluster.queued} queued on this cluster")


def _print_mine(mine: MyUsage) -> None:
    source = "the server's default" if mine.default else "set by an admin"
    out.line(f"\n[bold]you[/bold]: {mine.user} ({mine.role}); quota {source}")
    for label, text in quota_rows(mine.quota, mine.usage):
        out.line(f"  {label:>8}  {escape(text)}")
    if mine.active:
        out.line("\n[bold]your active runs[/bold]")
        out.table(
            ["RUN", "STATUS", "EXPERIMENT", "GPUS", "NODES"],
            [
                [r.run_id, status_text(r.status), r.experiment, str(r.gpus), ", ".join(r.nodes)]
                for r in mine.active
            ],
        )
    if mine.queued_runs:
        out.line("\n[bold]your queued runs[/bold]")
        out.table(
            ["RUN", "POSITION", "EXPERIMENT", "GPUS", "WHY IT WAITS"],
            [
                [r.run_id, f"#{r.queue_position}", r.experiment, str(r.gpus), escape(r.reason)]
                for r in mine.queued_runs
            ],
        )
    if mine.paused:
        out.line("\n[bold]your paused runs[/bold] (no GPUs held; `sf job resume RUN` re-queues)")
        out.table(
            ["RUN", "EXPERIMENT", "GPUS", "WHY"],
            [[r.run_id, r.experiment, str(r.gpus), escape(r.reason)] for r in mine.paused],
            cut=("WHY",),
        )
    if not mine.active and not mine.queued_runs and not mine.paused:
        out.line("\nyou have no active, queued or paused runs")


def status(json_out: JsonOpt = False) -> None:
    """Show the profiles, the cluster's free GPUs, your quota and usage, and your runs.

    Example: sf status --json
    """
    from starforge.cli.connect import connect
    from starforge.client import labops
    from starforge.contract.errors import NotFound

    out.set_json(json_out)
    with connect() as client:
        cluster = client.cluster_status()
        mine = client.my_usage()
        try:
            hours: MyGpuHours | None = labops.my_gpu_hours(client)
        except NotFound:  # a server from before GPU-hour accounting
            hours = None
    out.data(
        {
            "cluster": cluster.model_dump(mode="json"),
            "me": mine.model_dump(mode="json"),
            "gpu_hours": hours.model_dump(mode="json") if hours else None,
        }
    )
    _print_cluster(cluster)
    _print_mine(mine)
    if hours is not None:
        cap = "" if hours.daily_quota is None else f" of {hours.daily_quota:g} a day"
        out.line(f"\nGPU-hours: {hours.today:.2f} today (UTC){cap}, {hours.total:.2f} in total")
