"""The CLI's one output module: human text through rich, or JSON for scripts.

Commands never print directly; they call :data:`out`. In JSON mode stdout carries exactly one JSON
document per command and human chatter goes nowhere; errors are one red line plus a hint on
stderr (and a JSON error document on stdout in JSON mode).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from starforge.contract.errors import StarForgeError

# The ``--json`` flag of every command that prints: it puts :data:`out` in JSON mode.
JsonOpt = Annotated[bool, typer.Option("--json", help="Print a JSON document for scripts.")]

STATUS_STYLE = {
    "queued": "yellow",
    "starting": "cyan",
    "running": "cyan",
    "stopping": "magenta",
    "pausing": "magenta",
    "paused": "blue",
    "succeeded": "green",
    "failed": "red",
    "stopped": "bright_black",
}


class Output:
    def __init__(self) -> None:
        self.json_mode = False
        self.stdout = Console(highlight=False, soft_wrap=True)
        self.stderr = Console(stderr=True, highlight=False, soft_wrap=True)

    def set_json(self, enabled: bool) -> None:
        self.json_mode = enabled

    # ---- human text -------------------------------------------------------------------------

    def line(self, text: str = "") -> None:
        if not self.json_mode:
            self.stdout.print(text)

    def info(self, text: str) -> None:
        if not self.json_mode:
            self.stderr.print(text)

    def success(self, text: str) -> None:
        self.line(f"[green]✓[/green] {text}")

    def warn(self, text: str) -> None:
        if not self.json_mode:
            self.stderr.print(f"[yellow]warning:[/yellow] {escape(text)}")

    def raw(self, text: str) -> None:
        """Log text exactly as the job wrote it (no markup, no wrapping)."""
        sys.stdout.write(text)
        sys.stdout.flush()

    def table(
        self,
        columns: Sequence[str],
        rows: Sequence[Sequence[str]],
        *,
        wrap: Sequence[str] | None = None,
        cut: Sequence[str] = (),
    ) -> None:
        """Print rows under bold headers.

        With ``wrap`` or ``cut``, only the columns named there may give way: those in ``wrap``
        wrap, those in ``cut`` stay on one line and end with an ellipsis; every other cell is
        printed whole (a name the user copies is never cut), and the table grows past a narrow
        terminal or piped output's 80 columns rather than cut one.
        """
        if self.json_mode:
            return
        if wrap is None and not cut and self._print_plain(columns, rows):
            return
        table = Table(show_edge=False, box=None, pad_edge=False, header_style="bold")
        if wrap is None and not cut:
            for col in columns:
                table.add_column(col)
        else:
            _add_columns(table, columns, rows, wrap or (), self.stdout.width, cut)
        for row in rows:
            table.add_row(*row)
        self.stdout.print(table)

    def _print_plain(self, columns: Sequence[str], rows: Sequence[Sequence[str]]) -> bool:
        """Print the table as rich would, without rich's layout, when it can: every cell plain
        text (nothing rich would read as markup or an emoji code) and the table no wider than
        the screen; else print nothing and say so. Rich lays a table out cell by cell, which
        for a year of ``sf admin usage`` (11,000 rows) takes seconds; this takes milliseconds."""
        if not all(_is_plain(cell) for row in (columns, *rows) for cell in row):
            return False
        widths = [cell_len(c) for c in columns]
        for row in rows:
            if len(row) != len(columns):
                return False
            for i, cell in enumerate(row):
                widths[i] = max(widths[i], cell_len(cell))
        if sum(widths) + 2 * (len(widths) - 1) > self.stdout.width:
            return False

        def line(cells: Sequence[str]) -> str:
            return "  ".join(
                c + " " * (w - cell_len(c)) for c, w in zip(cells, widths, strict=True)
            )

        self.stdout.print(Text(line(columns), style="bold"))
        if rows:  # straight to the file: even Console.out makes a Text of every line
            self.stdout.file.write("".join(line(row) + "\n" for row in rows))
            self.stdout.file.flush()
        return True

    # ---- machine output ---------------------------------------------------------------------

    def data(self, payload: Any) -> None:
        if self.json_mode:
            sys.stdout.write(json.dumps(payload, indent=2, sort_keys=True, default=str) + "\n")

    def error(self, err: StarForgeError) -> None:
        self.stderr.print(f"[red]error:[/red] {escape(err.message)}")
        if err.hint:
            self.stderr.print(f"[dim]hint:[/dim] {escape(err.hint)}")
        if self.json_mode:
            sys.stdout.write(json.dumps({"error": err.to_wire()}, indent=2, default=str) + "\n")


def _is_plain(cell: str) -> bool:
    """Text rich prints as it is: no markup tag, no emoji code, nothing but printable text."""
    return "[" not in cell and ":" not in cell and cell.isprintable()


WRAP_MIN_WIDTH = 20  # a wrapped column never gets narrower than this
CUT_MIN_WIDTH = 12  # nor a column cut with an ellipsis


def _add_columns(
    table: Table,
    columns: Sequence[str],
    rows: Sequence[Sequence[str]],
    wrap: Sequence[str],
    screen: int,
    cut: Sequence[str] = (),
) -> None:
    """Kept columns as wide as their widest cell; the table wide enough to hold them whole."""
    needed = 2 * (len(columns) - 1)  # one space of padding on each inner side
    for i, col in enumerate(columns):
        if col in wrap:
            table.add_column(col, overflow="fold", min_width=WRAP_MIN_WIDTH)
            needed += WRAP_MIN_WIDTH
            continue
        if col in cut:
            table.add_column(col, overflow="ellipsis", no_wrap=True, min_width=CUT_MIN_WIDTH)
            needed += CUT_MIN_WIDTH
            continue
        widest = max([Text.from_markup(col).cell_len] + [_cells(r[i]) for r in rows])
        table.add_column(col, no_wrap=True, min_width=widest)
        needed += widest
    if needed > screen:
        table.width = needed


def _cells(markup: str) -> int:
    """The width ``markup`` takes on screen (tags and escapes do not count)."""
    return max((Text.from_markup(line).cell_len for line in markup.splitlines()), default=0)


def status_text(status: str) -> str:
    style = STATUS_STYLE.get(status, "")
    return f"[{style}]{status}[/{style}]" if style else status


def ago(when: datetime | None) -> str:
    if when is None:
        return "-"
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    seconds = int((datetime.now(UTC) - when).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit} ago"
    return f"{max(seconds, 0)}s ago"


def figure(value: float) -> str:
    """A GPU-hour or money figure: two decimals, two significant digits below 0.01 (a short run's
    hours are not shown as 0)."""
    return f"{value:,.2f}" if value >= 0.01 or value == 0 else f"{value:.2g}"


def cost_text(gpu_hours: float, cost: float | None, currency: str, note: str = "") -> str:
    """``3.20 GPU-hours (note)`` and, where the server prices them, `` ≈ 9.60 USD``."""
    money = f" ≈ {figure(cost)} {currency}".rstrip() if cost is not None else ""
    return f"{figure(gpu_hours)} GPU-hours" + (f" ({note})" if note else "") + money


def human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


out = Output()
