"""``sf job metrics`` and ``sf job console``: a run's curves in the terminal and in the browser.

``metrics`` prints the latest value of each metric the job reported (through
``starforge.report``) with its range and a small sparkline; ``--json`` prints the series. The
server downsamples long series keeping each bucket's lowest and highest value, so the range shown
is exact. ``console`` opens the web console signed in: the link carries the user's token in its
``#`` fragment, which browsers keep to themselves.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

import typer

from starforge.cli.cmd_job import RunArg, resolve, run_ref
from starforge.cli.output import out, status_text

SPARK = "▁▂▃▄▅▆▇█"
SPARK_WIDTH = 24


def sparkline(values: Sequence[float], width: int = SPARK_WIDTH) -> str:
    """``values`` as at most ``width`` block characters (bucket means, scaled min..max)."""
    if not values:
        return ""
    if len(values) > width:
        buckets = [
            values[i * len(values) // width : (i + 1) * len(values) // width] for i in range(width)
        ]
        values = [sum(b) / len(b) for b in buckets if b]
    low, high = min(values), max(values)
    if high == low:
        return SPARK[len(SPARK) // 2] * len(values)
    top = len(SPARK) - 1
    return "".join(SPARK[round((v - low) / (high - low) * top)] for v in values)


def number(value: float) -> str:
    return f"{value:.6g}"


def metrics(
    run: RunArg = None,
    key: Annotated[
        list[str],
        typer.Option("--key", "-k", help="Only this metric (repeatable), e.g. -k loss -k reward."),
    ] = [],  # noqa: B006
    points: Annotated[
        int,
        typer.Option(
            "--points", min=2, max=100_000, help="At most this many points per series (--json)."
        ),
    ] = 500,
    json_out: Annotated[bool, typer.Option("--json", help="Print the series as JSON.")] = False,
) -> None:
    """Show the latest value of each metric of a run, with its range and a sparkline.

    Examples: sf job metrics · sf job metrics r-7f3a -k loss --json
    """
    from starforge.cli.connect import connect

    out.set_json(json_out)
    with connect() as client:
        view = resolve(client, run)
        data = client.metrics(view.run_id, keys=key or None, max_points=points)
    out.data(
        {
            "run_id": view.run_id,
            "status": view.status,
            "keys": data.keys,
            "series": [s.model_dump(mode="json") for s in data.series],
        }
    )
    if not data.series:
        where = view.spec.observability_url if view.spec else ""
        hint = (
            f"its curves are external: {where}"
            if where
            else "curves come from starforge.report in the training code"
        )
        out.line(f"run {view.run_id} ({status_text(view.status)}) has no metrics yet; {hint}")
        return
    out.line(f"run [bold]{view.run_id}[/bold] {status_text(view.status)}")
    out.table(
        ["METRIC", "STEP", "LAST", "MIN", "MAX", "POINTS", "TREND"],
        [
            [
                s.key,
                str(s.last_step),
                number(s.last_value),
                number(min(s.values)),
                number(max(s.values)),
                str(s.count),
                sparkline(s.values),
            ]
            for s in data.series
        ],
    )


def console(
    run: Annotated[
        str | None,
        typer.Argument(help="Run id or prefix (default: the console's home).", callback=run_ref),
    ] = None,
    no_open: Annotated[
        bool, typer.Option("--no-open", help="Print the link instead of opening a browser.")
    ] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print a JSON document.")] = False,
) -> None:
    """Open the web console, signed in as you (projects, runs, logs, curves).

    Examples: sf job console · sf job console r-7f3a --no-open
    """
    import webbrowser

    from starforge.cli.connect import connect

    out.set_json(json_out)
    with connect() as client:
        run_id = client.get_run(run).run_id if run else None
        url = client.console_url(run_id, sign_in=True)
    out.data({"url": url, "run_id": run_id})
    if no_open or json_out or not webbrowser.open(url):
        out.line(url)
    else:
        out.info("opened the console in your browser")
