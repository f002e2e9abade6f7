"""Reading the report spool a job left: what the SDK wrote is read back in order, and nothing the
job could plant there (a link, a linked folder, a pipe, a cut line) makes its reader, who may be
root, read or remove anything outside it."""

from __future__ import annotations

import json
import os
from pathlib import Path

from starforge.client.sender import Spool
from starforge.contract import spoolfiles
from starforge.contract.layout import RunLayout


def body(step: int, attempt: int = 1) -> dict[str, object]:
    return {"attempt": attempt, "steps": [{"step": step, "t": 1.0, "values": {"loss": 0.5}}]}


def test_what_the_sdk_spooled_is_read_back_in_order_and_removed_by_name(tmp_path: Path) -> None:
    layout = RunLayout(tmp_path / "run")
    first, second = Spool(layout.report_spool), Spool(layout.report_spool)
    first.write([body(0), body(1)])
    os.utime(first.path, (1, 1))  # older: read first
    second.write([body(2)])
    claimed = first.claim(first.path)  # a replayer that died holding it
    assert claimed is not None

    files = spoolfiles.read(layout.out)
    steps = [b["steps"][0]["step"] for f in files for _, b in f.bodies()]
    assert (steps, [f.name for f in files]) == ([0, 1, 2], [claimed.name, second.path.name])
    assert spoolfiles.points_of(body(0)) == 1
    spoolfiles.Taken(layout.out, [f.name for f in files]).remove()
    assert list(layout.report_spool.iterdir()) == []


def test_a_line_cut_by_a_crash_and_other_files_are_skipped(tmp_path: Path) -> None:
    layout = RunLayout(tmp_path / "run")
    layout.report_spool.mkdir(parents=True)
    good = json.dumps(body(7))
    (layout.report_spool / "spool-h-1-a.jsonl").write_text(f'{good}\n[1, 2]\n{{"attempt": 1, "st')
    (layout.report_spool / "notes.txt").write_text(good + "\n")
    files = spoolfiles.read(layout.out)
    assert [f.name for f in files] == ["spool-h-1-a.jsonl"]
    assert [line for line, _ in files[0].bodies()] == [good.encode()]


def test_no_link_the_job_planted_is_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "another-run" / "out"
    other = RunLayout(elsewhere.parent)
    Spool(other.report_spool).write([body(1)])
    secret = next(other.report_spool.iterdir())
    layout = RunLayout(tmp_path / "run")
    layout.report_spool.mkdir(parents=True)
    (layout.report_spool / "spool-h-1-link.jsonl").symlink_to(secret)
    os.mkfifo(layout.report_spool / "spool-h-1-fifo.jsonl")  # would block a reader forever
    assert spoolfiles.read(layout.out) == []
    spoolfiles.remove(layout.out, ["spool-h-1-link.jsonl"])
    assert secret.read_text().strip() == json.dumps(body(1), separators=(",", ":"))

    # The folders themselves may be links too: .starforge, or report-spool.
    linked = RunLayout(tmp_path / "linked")
    linked.report_spool.parent.mkdir(parents=True)
    linked.report_spool.symlink_to(other.report_spool)
    assert spoolfiles.read(linked.out) == []
    spoolfiles.remove(linked.out, [secret.name])
    whole = RunLayout(tmp_path / "whole")
    whole.out.mkdir(parents=True)
    (whole.out / ".starforge").symlink_to(other.report_spool.parent)
    assert spoolfiles.read(whole.out) == []
    assert secret.exists()


def test_a_spool_beyond_the_byte_limit_is_left_for_later(tmp_path: Path) -> None:
    layout = RunLayout(tmp_path / "run")
    Spool(layout.report_spool).write([body(i) for i in range(100)])
    assert spoolfiles.read(layout.out, max_bytes=100) == []
    assert len(spoolfiles.read(layout.out)) == 1
    assert spoolfiles.read(tmp_path / "no-such-run" / "out") == []
