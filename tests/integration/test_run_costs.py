"""Cost per run through ``sf`` and the real server: a short job on a GPU profile of the local
executor's virtual inventory, and its GPU-hours in ``sf job status``, ``sf job ls --wide`` and
``sf admin usage --by run`` — each the attempt's GPUs × its own recorded start and end, and priced
by the server's ``gpu_hour_prices``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from starforge.cli.output import figure
from starforge.project.lab import Lab
from tests.conftest import Result
from tests.integration.conftest import embedded_server, wait_for

pytestmark = pytest.mark.integration
IMAGE = "registry.example/train:v1"
FINAL = {"succeeded", "failed", "stopped"}
H200_PRICE = 3.0


@pytest.fixture(scope="module")
def server_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """This module's server prices h200 GPU-hours (and no other series)."""
    settings = {"gpu_hour_prices": {"h200": H200_PRICE}, "currency": "USD"}
    with embedded_server(tmp_path_factory.mktemp("sf-home"), settings) as home:
        yield home


def sf_json(sf: Callable[..., Result], *args: str) -> Any:
    got = sf(*args, "--json")
    assert got.code == 0, got.err + got.out
    return got.json()


def test_a_runs_gpu_hours_and_cost_are_its_attempts_gpus_times_wall_time_in_every_view(
    sf: Callable[..., Result], custom_lab: Callable[..., Lab]
) -> None:
    lab = custom_lab(steps=3)
    got = sf("submit", "c1", "--profile", "h200:1", "--image", IMAGE, "--json", cwd=lab.root)
    assert got.code == 0, got.err + got.out
    run_id = got.json()["run_id"]
    view = wait_for(sf, run_id, FINAL)
    assert view["status"] == "succeeded", view["reason"]

    (attempt,) = view["attempts"]  # type: ignore[misc]
    start, end = (datetime.fromisoformat(attempt[k]) for k in ("started_at", "ended_at"))
    hours = 1 * (end - start).total_seconds() / 3600  # h200:1 holds one GPU
    assert hours > 0
    assert attempt["gpus"] == 1
    assert attempt["gpu_hours"] == pytest.approx(hours)
    assert view["gpu_hours"] == pytest.approx(hours)
    assert attempt["cost"] == view["cost"] == pytest.approx(hours * H200_PRICE)
    assert view["currency"] == attempt["currency"] == "USD"

    shown = sf("job", "status", run_id)
    assert shown.code == 0, shown.err
    cost_line = next(line for line in shown.out.splitlines() if line.strip().startswith("cost"))
    assert f"{figure(hours)} GPU-hours (1 attempt)" in cost_line
    assert f"≈ {figure(hours * H200_PRICE)} USD" in cost_line

    listed = sf("job", "ls", "--wide")
    assert listed.code == 0, listed.err
    header, *lines = listed.out.splitlines()
    assert "GPU-H" in header.split() and "COST" in header.split()
    row = next(line for line in lines if line.startswith(run_id))
    assert figure(hours) in row.split() and "USD" in row.split()
    assert "GPU-H" not in sf("job", "ls").out  # only with --wide
    as_json = {r["run_id"]: r for r in sf_json(sf, "job", "ls", "--wide")}
    assert as_json[run_id]["gpu_hours"] == pytest.approx(hours)

    report = sf_json(sf, "admin", "usage", "--by", "run")
    rows = {r["run_id"]: r for r in report["rows"]}
    assert rows[run_id]["gpu_hours"] == pytest.approx(view["gpu_hours"])
    assert rows[run_id]["cost"] == pytest.approx(rows[run_id]["gpu_hours"] * H200_PRICE)
    assert (rows[run_id]["user"], rows[run_id]["experiment"]) == (view["user"], "c1")
    assert report["currency"] == "USD"
    hours_order = [r["gpu_hours"] for r in report["rows"]]
    assert hours_order == sorted(hours_order, reverse=True)
    table = sf("admin", "usage", "--by", "run")
    assert table.code == 0 and "COST (USD)" in table.out
    assert any(line.startswith(run_id) for line in table.out.splitlines())
