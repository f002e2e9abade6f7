"""The web console in a real browser: headless Chromium (Debian's ``chromium`` package) driven by
Playwright, against the real embedded server with a real run.

The user's path: a visitor who is not signed in gets the sign-in page, where a wrong token is
refused and their own token lets them in (the top bar names them and their role); the console's
home lists the project (the lab's ``starforge.yaml`` name), the
project page lists the run, the run page shows the ``loss`` curve with every logged point and the
live log, which keeps growing while the run goes on and says when it ended. A screenshot of the
run page is saved under ``test-artifacts/``.
"""

from __future__ import annotations

import importlib.util
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from starforge.client import config
from starforge.project import experiments
from starforge.project.lab import Lab
from tests.conftest import Result, commit_all
from tests.integration.conftest import server_home, sf_home, wait_for  # noqa: F401  (fixtures)

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
POINTS = 12
BROWSER_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        shutil.which(CHROMIUM) is None,
        reason=f"Debian's chromium is not installed ({CHROMIUM}): `apt-get install chromium` "
        "(scripts/test.sh installs it)",
    ),
    pytest.mark.skipif(
        importlib.util.find_spec("playwright") is None,
        reason="the playwright package is not installed (the [dev] extra)",
    ),
]

# Logs POINTS points of loss, then keeps running (printing) until the test drops a file.
JOB = f"""#!/usr/bin/env bash
set -euo pipefail
python - <<'PY'
import math, os, time
from pathlib import Path
import starforge.report as report

report.init(hparams={{"lr": 0.01}})
for step in range({POINTS}):
    report.log({{"loss": 2 / math.sqrt(step + 1), "reward": step / {POINTS}}}, step=step)
    print(f"step {{step}} loss {{2 / math.sqrt(step + 1):.4f}}", flush=True)
report.flush()
release = Path(os.environ["FORGE_OUT_DIR"]) / "release"
while not release.exists():
    time.sleep(0.1)
print("released: the last line", flush=True)
PY
"""


def points_of(sf: Callable[..., Result], run_id: str) -> int:
    got = sf("job", "metrics", run_id, "--json", "-k", "loss").json()
    series = got["series"]  # type: ignore[index]
    return int(series[0]["count"]) if series else 0


def test_the_console_shows_a_runs_curve_and_live_log_under_its_project(
    sf: Callable[..., Result], new_lab: Callable[..., Lab]
) -> None:
    from playwright.sync_api import sync_playwright

    lab = new_lab("vision-lab")
    experiments.new_experiment(lab, "curves", "custom/custom")
    folder = lab.root / "experiments" / "curves"
    (folder / "train.sh").write_text(JOB)
    (folder / "config.yaml").write_text("starforge:\n  observability: platform\n")
    commit_all(lab.root, "add curves")
    submitted = sf(
        "submit",
        "curves",
        "--profile",
        "h200:1",
        "--image",
        "reg.example/t:1",
        "--json",
        cwd=lab.root,
    )
    assert submitted.code == 0, submitted.err
    run_id = str(submitted.json()["run_id"])  # type: ignore[index]
    deadline = time.monotonic() + 120
    while points_of(sf, run_id) < POINTS and time.monotonic() < deadline:
        time.sleep(0.2)
    assert points_of(sf, run_id) == POINTS
    out_dir = Path(str(wait_for(sf, run_id, {"running"})["run_dir"])) / "out"
    info, token = config.read_server_file(), config.read_local_token()
    assert info is not None and token

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(30_000)
            page.goto(f"{info['url']}/#/")
            page.locator("#signin").wait_for()  # not signed in: the sign-in page, nothing else
            page.fill("#tok", "not-a-token")
            page.click("#signin button")
            page.locator(".error", has_text="That token was not accepted.").wait_for()
            page.fill("#tok", token)
            page.click("#signin button")
            page.locator(f'a.card[data-project="{lab.name}"]').wait_for()
            page.locator("#who .role", has_text="admin").wait_for()
            assert page.evaluate("() => localStorage.length") == 0  # kept for the tab only

            page.click("#signout")
            page.locator("#signin").wait_for()
            page.goto(f"{info['url']}/#/?token={token}")  # a signed-in link (sf job console)
            # the token leaves the address bar as soon as the page reads it
            page.wait_for_function("() => !location.href.includes('token=')")

            page.click(f'a.card[data-project="{lab.name}"]')
            row = page.locator(f'tr[data-run-id="{run_id}"]')
            row.wait_for()
            assert "running" in row.inner_text()
            row.locator("a").click()

            chart = page.locator('.chart[data-key="loss"]')
            chart.wait_for()
            page.wait_for_function(
                "n => document.querySelector('.chart[data-key=\"loss\"]').dataset.points === n",
                arg=str(POINTS),
            )
            drawn = page.evaluate(
                "() => document.querySelector('.chart[data-key=\"loss\"] .plot').data[0].x.length"
            )
            assert drawn == POINTS
            assert f"{POINTS} points" in chart.inner_text()

            log = page.locator("#log")
            page.wait_for_function(
                "() => document.getElementById('log').textContent.includes('step 11 loss')"
            )
            (out_dir / "release").touch()  # the job prints one more line, then ends
            page.wait_for_function(
                "() => document.getElementById('log').textContent.includes('released')"
            )
            page.wait_for_function(
                "() => document.getElementById('live').textContent === 'ended: succeeded'"
            )
            assert log.inner_text().count("step 0 loss") == 1  # no line shown twice
            page.wait_for_function(
                "() => document.querySelector('#run-status .status').textContent === 'succeeded'"
            )
            page.locator("#artifacts", has_text="release").wait_for()  # what the run left in out/
            page.screenshot(path=str(ARTIFACTS / "console-run.png"), full_page=True)
        finally:
            browser.close()
    assert (ARTIFACTS / "console-run.png").stat().st_size > 10_000
