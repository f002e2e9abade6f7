"""A real embedded server per test module, started by ``sf`` itself in an isolated home.

These servers start as production starts them: ``sf`` runs ``python -m starforge.server`` in a new
process that does its own imports (``connect.popen_server``), not forked from the suite's preloaded
interpreter as the other packages' servers are (``tests/forked_servers.py``), so whatever only
a cold start does (import order, start-up settings read from the environment) is tested here.

With ``STARFORGE_TEST_DATABASE_URL`` set, every module's servers use a fresh PostgreSQL database
(``STARFORGE_DATABASE_URL`` in the environment the servers inherit) instead of SQLite.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from starforge.cli import connect
from starforge.cli.main import main
from starforge.project import experiments, lab
from tests.conftest import Result, commit_all
from tests.postgres.databases import URL, Databases, on_postgres

pytestmark = pytest.mark.integration


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # On PostgreSQL (the suite's second pass) the tests of the client and the transport (the
    # warm client, the logs fast path, TLS, connectivity, dry runs) would do exactly what they
    # did on SQLite: they are not run again.
    if not on_postgres():
        return
    here = Path(__file__).parent
    done = [i for i in items if here in i.path.parents and i.get_closest_marker("client")]
    if done:
        config.hook.pytest_deselected(items=done)
        items[:] = [i for i in items if i not in done]


@pytest.fixture(scope="package", autouse=True)
def _servers_started_as_in_production() -> Iterator[None]:
    """Every server of this package starts with Popen, as ``sf server start`` does for a user."""
    saved = connect.launch_server
    connect.launch_server = connect.popen_server
    yield
    connect.launch_server = saved


@pytest.fixture(scope="session")
def databases() -> Iterator[Databases | None]:
    if not on_postgres():
        yield None
        return
    made = Databases(URL)
    yield made
    made.close()


@pytest.fixture(scope="module", autouse=True)
def _module_database(databases: Databases | None) -> Iterator[None]:
    """This module's servers run on a fresh PostgreSQL database when the suite runs on one."""
    if databases is None:
        yield
        return
    url = databases.fresh()
    saved = os.environ.get("STARFORGE_DATABASE_URL")
    os.environ["STARFORGE_DATABASE_URL"] = url
    yield
    if saved is None:
        os.environ.pop("STARFORGE_DATABASE_URL", None)
    else:
        os.environ["STARFORGE_DATABASE_URL"] = saved
    databases.drop(url)


@contextmanager
def embedded_server(home: Path, settings: dict[str, Any] | None = None) -> Iterator[Path]:
    """``sf server start`` in ``home`` (with ``settings`` as its server.yaml) for the block; at
    the end its runs are stopped (runners outlive their server by design: a test must not leave
    one behind), the server is stopped and the environment restored."""
    if settings is not None:
        (home / "server.yaml").write_text(yaml.safe_dump(settings))
    saved = {k: os.environ.get(k) for k in ("STARFORGE_HOME", "STARFORGE_SERVER")}
    os.environ["STARFORGE_HOME"] = str(home)
    os.environ.pop("STARFORGE_SERVER", None)
    assert main(["server", "start"]) == 0
    try:
        yield home
    finally:
        stop_every_run()
        main(["server", "stop"])
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture(scope="module")
def server_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with embedded_server(tmp_path_factory.mktemp("sf-home")) as home:
        yield home


def stop_every_run(limit_s: float = 120.0) -> None:
    """Stop the runs of this home's server that still hold an executor, and wait until none do."""
    from starforge.cli.connect import connect
    from starforge.contract.errors import ServerUnreachable

    active = {"starting", "running", "stopping", "pausing"}
    try:
        client = connect(start=False)
    except ServerUnreachable:  # a test stopped its server itself
        return
    with client:
        for run in client.list_runs(limit=1000).runs:
            if run.status.value in active | {"queued"}:
                client.stop(run.run_id)
        deadline = time.monotonic() + limit_s
        while any(r.status.value in active for r in client.list_runs(limit=1000).runs):
            if time.monotonic() > deadline:
                raise AssertionError("runs still active after being stopped")
            time.sleep(0.2)


@pytest.fixture
def sf_home(server_home: Path) -> Path:
    """Integration tests share their module's server instead of an empty home."""
    return server_home


@pytest.fixture
def custom_lab(new_lab: Callable[..., lab.Lab]) -> Callable[..., lab.Lab]:
    """A lab with one custom/custom experiment whose train.sh runs ``steps`` steps.

    ``resumed_step_seconds`` paces the attempts after the first: a test whose first attempt is
    slow only so that it is still training when the test acts on it (pause, stop, kill) lets
    the resumed attempt finish its remaining steps quickly, with the same steps and checkpoints.
    """

    def make(
        name: str = "c1",
        steps: int = 5,
        step_seconds: float = 0.01,
        resumed_step_seconds: float | None = None,
    ) -> lab.Lab:
        made = new_lab()
        experiments.new_experiment(made, name, "custom/custom")
        script = made.root / "experiments" / name / "train.sh"
        text = script.read_text()
        text = re.sub(r'STEPS="\$\{STEPS:-\d+\}"', f'STEPS="${{STEPS:-{steps}}}"', text)
        pace = f'STEP_SECONDS="${{STEP_SECONDS:-{step_seconds}}}"'
        if resumed_step_seconds is not None:
            resumed = f"STEP_SECONDS={resumed_step_seconds}"
            pace += f'\nif [[ "${{FORGE_ATTEMPT:-1}}" != 1 ]]; then {resumed}; fi'
        text, found = re.subn(r'STEP_SECONDS="\$\{STEP_SECONDS:-[0-9.]+\}"', pace, text)
        assert found == 1, "the template's train.sh sets STEP_SECONDS once"
        script.write_text(text)
        # custom/custom keeps its curves elsewhere unless the experiment opts into the platform's
        # (else every submit would need --observability-url).
        (made.root / "experiments" / name / "config.yaml").write_text(
            "starforge:\n  observability: platform\n"
        )
        # Unique content per lab, so blob de-duplication across tests cannot hide an upload.
        (made.root / "experiments" / name / "lab-id.txt").write_text(f"{uuid.uuid4()}\n")
        commit_all(made.root, f"add {name}")
        return made

    return make


def wait_for(
    sf: Callable[..., Result], run_id: str, statuses: set[str], timeout: float = 180.0
) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while True:
        view = sf("job", "status", run_id, "--json").json()
        assert isinstance(view, dict)
        if view["status"] in statuses or time.monotonic() > deadline:
            return view
        time.sleep(0.2)
