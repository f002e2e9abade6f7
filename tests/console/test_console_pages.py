"""The console's project page a page at a time, in a real browser (headless Chromium through
Playwright) against the real embedded server: it shows the project's newest runs, and "Older runs"
adds the next page after them, none twice, until none is left (then the button is gone)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from starforge.client import config
from tests.console.test_console_browser import BROWSER_ARGS, CHROMIUM, pytestmark  # noqa: F401
from tests.integration.conftest import server_home  # noqa: F401  (fixture)
from tests.integration.test_run_pages import START, add_runs, client_of

PAGE = 50  # the console's page (app.js)


def test_the_project_page_shows_the_newest_runs_and_older_ones_on_asking(
    server_home: Path,  # noqa: F811
) -> None:
    from playwright.sync_api import sync_playwright

    with client_of(server_home) as client:
        owner = client.whoami().user
    made = {f"r-con{i:04d}": START + timedelta(minutes=i) for i in range(PAGE + 7)}
    add_runs(server_home, owner, made, project="paged")
    newest_first = sorted(made, reverse=True)
    info, token = config.read_server_file(), config.read_local_token()
    assert info is not None and token
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
        try:
            page = browser.new_page()
            page.set_default_timeout(30_000)
            page.goto(f"{info['url']}/#/projects/paged?token={token}")
            page.locator("#older").wait_for()
            shown = page.eval_on_selector_all(
                "tr[data-run-id]", "rs => rs.map(r => r.dataset.runId)"
            )
            assert shown == newest_first[:PAGE]
            page.click("#older")
            page.wait_for_function(
                "n => document.querySelectorAll('tr[data-run-id]').length === n",
                arg=len(made),
            )
            shown = page.eval_on_selector_all(
                "tr[data-run-id]", "rs => rs.map(r => r.dataset.runId)"
            )
            assert shown == newest_first
            assert page.locator("#older").count() == 0
        finally:
            browser.close()
