"""The console as a workbench, in a real browser (headless Chromium through Playwright) against a
real embedded server with real runs and users.

- Compare: two runs of two experiments ticked on the project page open ``#/compare?runs=A,B``
  (a link that opens the same view on its own), with both runs' curves on one chart per metric,
  a smoothing slider that redraws them, and the diff of ``GET /runs-diff`` naming the key that
  differs. A screenshot of the page is saved under ``test-artifacts/``.
- Actions: a member stops their own running run from its page (the confirmation accepted), the
  page shows what the API answered and the new status, and ``sf job status`` agrees; the buttons
  follow the status (a stopped run offers retry).
- A viewer (a member made a viewer, who still sees their own run) gets no action button, and the
  API refuses the action for that viewer's token.
- A member stops their ``sf sweep`` from its page: every variant still queued (their quota holds
  no run) ends stopped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from starforge.client import config
from starforge.contract.api import API_PREFIX
from starforge.project import experiments
from starforge.project.lab import Lab
from tests.conftest import Result, commit_all
from tests.console.test_console_browser import (  # noqa: F401  (pytestmark: the skips)
    ARTIFACTS,
    BROWSER_ARGS,
    CHROMIUM,
    pytestmark,
)
from tests.integration.conftest import embedded_server, sf_home, wait_for  # noqa: F401
from tests.integration.test_lab_sweeps import SFT_ARGS, sft_lab
from tests.integration.test_users import Team

INVENTORY = [{"name": "h200-1", "series": "h200", "gpus": 8}]
POINTS = 10
ENDED = {"succeeded", "failed", "stopped"}

# Logs POINTS points of a loss that depends on the experiment's learning rate, then ends.
CURVE_JOB = """#!/usr/bin/env bash
set -euo pipefail
python - <<'PY'
import starforge.report as report

report.init(hparams={{"learning_rate": {lr}}})
for step in range({points}):
    report.log({{"loss": 3.0 / (1 + {lr} * 100 * step) + 0.1 * (step % 2)}}, step=step)
report.flush()
PY
"""

# Runs until it is stopped (or its out dir gets a file named release).
HELD_JOB = """#!/usr/bin/env bash
set -euo pipefail
echo "holding $FORGE_RUN_ID"
while [[ ! -e "$FORGE_OUT_DIR/release" ]]; do sleep 0.05; done
"""


@pytest.fixture(scope="module")
def server_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with embedded_server(tmp_path_factory.mktemp("sf-workbench"), {"inventory": INVENTORY}) as home:
        yield home


def add_experiment(lab: Lab, name: str, job: str, config_yaml: str = "") -> None:
    experiments.new_experiment(lab, name, "custom/custom")
    folder = lab.root / "experiments" / name
    (folder / "train.sh").write_text(job)
    (folder / "config.yaml").write_text(config_yaml + "starforge:\n  observability: platform\n")


def submitted(run: Callable[..., Result], lab: Lab, experiment: str) -> str:
    got = run(
        "submit", experiment, "--profile", "h200:1", "--image", "reg.example/t:1", "--json",
        cwd=lab.root,
    )  # fmt: skip
    assert got.code == 0, got.err
    return str(got.json()["run_id"])  # type: ignore[index]


@contextmanager
def chromium() -> Iterator[Any]:
    """A fresh headless browser page (30 s for any wait), closed at the end."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(30_000)
            yield page
        finally:
            browser.close()


def server_url() -> str:
    info = config.read_server_file()
    assert info is not None
    return str(info["url"])


def traces(page: Any, key: str) -> list[dict[str, Any]]:
    return page.evaluate(  # type: ignore[no-any-return]
        'k => document.querySelector(`.chart[data-key="${k}"] .plot`).data'
        ".map(t => ({name: t.name, x: t.x, y: t.y}))",
        key,
    )


def test_two_runs_of_two_experiments_compare_as_overlaid_curves_and_the_key_that_differs(
    sf: Callable[..., Result], new_lab: Callable[..., Lab]
) -> None:
    lab = new_lab("compare-lab")
    for name, lr in (("lr-small", 0.01), ("lr-large", 0.05)):
        job = CURVE_JOB.format(lr=lr, points=POINTS)
        add_experiment(lab, name, job, f"learning_rate: {lr}\n")
    commit_all(lab.root, "two learning rates")
    first, second = submitted(sf, lab, "lr-small"), submitted(sf, lab, "lr-large")
    for run_id in (first, second):
        assert wait_for(sf, run_id, ENDED)["status"] == "succeeded"
    token = config.read_local_token()
    assert token

    ARTIFACTS.mkdir(exist_ok=True)
    with chromium() as page:
        page.goto(f"{server_url()}/#/projects/{lab.name}?token={token}")
        for run_id in (first, second):
            page.locator(f'input.pick[data-run-id="{run_id}"]').check()
        page.locator("#compare", has_text="Compare 2 runs").click()
        page.wait_for_function("() => location.hash.startsWith('#/compare?runs=')")
        assert sorted(page.evaluate("() => location.hash").split("=", 1)[1].split(",")) == sorted(
            [first, second]
        )
        link = page.evaluate("() => location.href")

        page.wait_for_function(
            "() => document.querySelector('.chart[data-key=\"loss\"] .plot')?.data?.length === 2"
        )
        drawn = traces(page, "loss")
        assert {t["name"] for t in drawn} == {first, second}
        assert all(t["x"] == list(range(POINTS)) for t in drawn)  # one step axis
        row = page.locator('#diff-table tr[data-key="learning_rate"]')
        row.wait_for()
        assert "0.01" in row.inner_text() and "0.05" in row.inner_text()
        assert page.locator("#diff-table tbody tr").count() == 1  # nothing else differs

        raw = {t["name"]: t["y"] for t in drawn}
        page.locator("#smoothing").fill("0.9")
        page.wait_for_function(
            "() => document.getElementById('smoothing-value').textContent === '0.9'"
        )
        smoothed = {t["name"]: t["y"] for t in traces(page, "loss")}
        for name, values in raw.items():  # EMA: the first point stays, the zigzag flattens
            assert smoothed[name][0] == pytest.approx(values[0])
            assert smoothed[name] != pytest.approx(values)
        page.screenshot(path=str(ARTIFACTS / "console-compare.png"), full_page=True)

    with chromium() as page:  # the link alone opens the same comparison (signed in again)
        page.goto(f"{server_url()}/#/?token={token}")
        page.locator("a.card").first.wait_for()
        page.goto(link)
        page.locator('#diff-table tr[data-key="learning_rate"]').wait_for()
        page.wait_for_function(
            "() => document.querySelector('.chart[data-key=\"loss\"] .plot')?.data?.length === 2"
        )
    assert (ARTIFACTS / "console-compare.png").stat().st_size > 10_000


def test_a_member_stops_their_own_running_run_from_its_page(
    sf: Callable[..., Result], monkeypatch: pytest.MonkeyPatch, new_lab: Callable[..., Lab]
) -> None:
    team = Team(sf, monkeypatch)
    team.add("mia", "member")
    lab = new_lab("mia-lab")
    add_experiment(lab, "held", HELD_JOB)
    commit_all(lab.root, "a held job")
    run_id = submitted(lambda *a, cwd=None: team.as_("mia", *a, cwd=cwd), lab, "held")
    assert wait_for(sf, run_id, {"running", *ENDED})["status"] == "running"

    with chromium() as page:
        page.goto(f"{server_url()}/#/runs/{run_id}?token={team.tokens['mia']}")
        page.locator('#actions button[data-action="stop"]').wait_for()
        offered = page.eval_on_selector_all(
            "#actions button", "bs => bs.map(b => b.dataset.action)"
        )
        assert offered == ["stop", "pause"]  # what a running run allows
        asked: list[str] = []

        def accept(dialog: Any) -> None:
            asked.append(dialog.message)
            dialog.accept()

        page.once("dialog", accept)
        page.click('#actions button[data-action="stop"]')
        page.locator("#action-result .result.ok", has_text=f"run {run_id} is stopping").wait_for()
        assert asked and asked[0].startswith(f"Stop run {run_id}?")
        page.wait_for_function(
            "() => ['stopping', 'stopped'].includes("
            "document.querySelector('#run-status .status').textContent)"
        )
        by_cli = team.status("mia", run_id)
        assert by_cli["status"] in {"stopping", "stopped"}
        page.wait_for_function(
            "() => document.querySelector('#run-status .status').textContent === 'stopped'"
        )
        page.locator('#actions button[data-action="retry"]').wait_for()  # what stopped allows
        page.screenshot(path=str(ARTIFACTS / "console-actions.png"), full_page=True)
    final = team.status("mia", run_id)
    assert (final["status"], final["end_reason"]) == ("stopped", "stopped_by_user")


def test_a_viewer_sees_no_action_and_the_api_refuses_the_viewers_token(
    sf: Callable[..., Result], monkeypatch: pytest.MonkeyPatch, new_lab: Callable[..., Lab]
) -> None:
    team = Team(sf, monkeypatch)
    team.add("val", "member")
    lab = new_lab("val-lab")
    add_experiment(lab, "held", HELD_JOB)
    commit_all(lab.root, "a held job")
    run_id = submitted(lambda *a, cwd=None: team.as_("val", *a, cwd=cwd), lab, "held")
    assert wait_for(sf, run_id, {"running", *ENDED})["status"] == "running"
    assert sf("admin", "user", "set-role", "val", "viewer").code == 0  # keeps seeing their run
    token = team.tokens["val"]

    with chromium() as page:
        page.goto(f"{server_url()}/#/runs/{run_id}?token={token}")
        page.locator("#who .role", has_text="viewer").wait_for()
        page.locator("#actions #read-only").wait_for()
        assert page.locator("#actions button").count() == 0
        assert page.locator("button.act").count() == 0
        refusal = page.get_attribute("#read-only", "title")
        assert refusal and "only members, operators and admins may act on run" in refusal

    with httpx.Client(base_url=server_url(), headers={"Authorization": f"Bearer {token}"}) as api:
        refused = api.post(f"{API_PREFIX}/runs/{run_id}/stop")
        assert refused.status_code == 403
        assert refused.json()["message"] == refusal
    assert team.status("val", run_id)["status"] == "running"  # nothing changed


def test_the_run_page_shows_a_reruns_lineage_both_ways_with_its_image_and_cost(
    sf: Callable[..., Result], new_lab: Callable[..., Lab]
) -> None:
    lab = new_lab("lineage-lab")
    add_experiment(lab, "curve", CURVE_JOB.format(lr=0.01, points=3))
    commit_all(lab.root, "a curve")
    parent = submitted(sf, lab, "curve")
    assert wait_for(sf, parent, ENDED)["status"] == "succeeded"
    again = sf("job", "rerun", parent, "--json")
    assert again.code == 0, again.err
    child = str(again.json()["run_id"])  # type: ignore[index]
    assert wait_for(sf, child, ENDED)["status"] == "succeeded"
    token = config.read_local_token()

    with chromium() as page:
        page.goto(f"{server_url()}/#/runs/{child}?token={token}")
        lineage = page.locator("#lineage")
        lineage.locator(f'a[href="#/runs/{parent}"]').wait_for()
        text = lineage.inner_text()
        assert f"rerun of\n{parent}" in text
        assert "reg.example/t:1" in text and "GPU-hours" in text
        lineage.locator(f'a[href="#/runs/{parent}"]').click()  # to the run it reruns
        page.wait_for_function(
            "id => document.getElementById('run-title').textContent === id", arg=parent
        )
        page.locator(f'#lineage a[href="#/runs/{child}"]').wait_for()  # and back: its reruns
        assert f"reruns\n{child}" in page.locator("#lineage").inner_text()


def test_a_member_stops_their_sweep_from_its_page(
    sf: Callable[..., Result], monkeypatch: pytest.MonkeyPatch, new_lab: Callable[..., Lab]
) -> None:
    team = Team(sf, monkeypatch)
    team.add("sam", "member")
    lab = sft_lab(new_lab)
    add_experiment(lab, "held", HELD_JOB)
    commit_all(lab.root, "a held job")
    # sam may hold one run at once and holds one: the sweep's variants wait in the queue.
    assert sf("admin", "quota", "set", "sam", "--max-runs", "1").code == 0
    holder = submitted(lambda *a, cwd=None: team.as_("sam", *a, cwd=cwd), lab, "held")
    assert wait_for(sf, holder, {"running", *ENDED})["status"] == "running"
    got = team.as_(
        "sam", "sweep", "s1", "-g", "learning_rate=1e-5,3e-4", *SFT_ARGS, "--json", cwd=lab.root
    )
    assert got.code == 0, got.err + got.out
    created: Any = got.json()
    sweep_id, runs = created["sweep_id"], [r["run_id"] for r in created["runs"]]
    for run_id in runs:
        assert team.status("sam", run_id)["status"] == "queued"

    with chromium() as page:
        page.goto(f"{server_url()}/#/sweeps/{sweep_id}?token={team.tokens['sam']}")
        page.locator("#variants").wait_for()
        page.once("dialog", lambda dialog: dialog.accept())
        page.locator("#stop-sweep", has_text="Stop sweep").click()
        page.locator("#action-result .result.ok", has_text="2 of 2 variants stopped").wait_for()
        page.wait_for_function(
            "() => [...document.querySelectorAll('#variants .status')]"
            ".every(s => s.textContent === 'stopped')"
        )
        assert page.locator("#stop-sweep").count() == 0  # nothing left to stop
    for run_id in runs:
        assert team.status("sam", run_id)["status"] == "stopped"
    assert team.status("sam", holder)["status"] == "running"  # not a variant: left alone
    assert team.as_("sam", "job", "stop", holder).code == 0
    assert sf("admin", "quota", "set", "sam", "--max-runs", "none").code == 0
