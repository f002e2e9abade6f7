"""``out.table``: the text a table prints, however it is laid out."""

from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table

from starforge.cli.output import Output

COLUMNS = ["DAY", "USER", "PROJECT", "GPU-HOURS"]
ROWS = [
    ["2026-03-01", "alice", "vision", "6"],
    ["2026-03-02", "bob-the-longest-name", "p", "12,345.25"],
    ["2026-03-02", "zoë", "日本語", "0.5"],  # wide characters take two cells each
]


def printed(columns: list[str], rows: list[list[str]], width: int = 80) -> str:
    output = Output()
    output.stdout = Console(file=io.StringIO(), width=width, highlight=False, soft_wrap=True)
    output.table(columns, rows)
    assert isinstance(output.stdout.file, io.StringIO)
    return output.stdout.file.getvalue()


def as_rich_prints(columns: list[str], rows: list[list[str]], width: int = 80) -> str:
    console = Console(file=io.StringIO(), width=width, highlight=False, soft_wrap=True)
    table = Table(show_edge=False, box=None, pad_edge=False, header_style="bold")
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*row)
    console.print(table)
    assert isinstance(console.file, io.StringIO)
    return console.file.getvalue()


def test_a_table_of_plain_text_prints_exactly_what_rich_prints() -> None:
    assert printed(COLUMNS, ROWS) == as_rich_prints(COLUMNS, ROWS)
    assert printed(COLUMNS, []) == as_rich_prints(COLUMNS, [])


def test_a_large_usage_table_prints_every_row_aligned() -> None:
    rows = [[f"2026-01-{d:02d}", f"user{u}", f"p{u % 3}", f"{u * d / 7:.2f}"]
            for d in range(1, 29) for u in range(40)]  # fmt: skip
    text = printed(COLUMNS, rows)
    assert text == as_rich_prints(COLUMNS, rows)
    lines = text.splitlines()
    assert len(lines) == 1 + len(rows)
    assert lines[1].split() == rows[0]


def test_markup_and_tables_wider_than_the_screen_are_still_laid_out_by_rich() -> None:
    marked = [["[bold]alice[/bold]", "x", "y", "1"]]
    assert "alice" in printed(COLUMNS, marked) and "[bold]" not in printed(COLUMNS, marked)
    assert printed(COLUMNS, marked) == as_rich_prints(COLUMNS, marked)
    wide = [["2026-03-01", "u" * 50, "p" * 40, "1"]]
    assert printed(COLUMNS, wide) == as_rich_prints(COLUMNS, wide)
