"""Shared fixtures: an isolated StarForge home, labs in real git repos, and running ``sf``."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from starforge.cli.main import main
from starforge.project import experiments, lab
from tests import forked_servers, tiny_inputs

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
# Jobs run on the host unless a test asks for containers itself (``containers="podman"`` in its
# settings, which outranks the environment): the suite's images live in no registry, so a
# machine that has podman must not make every submission resolve a digest.
os.environ.setdefault("STARFORGE_CONTAINERS", "none")
# The suite's `sf` processes run every command themselves and leave no warm daemon behind
# (tests of the warm client turn it on for the processes they start, and stop their daemons).
os.environ["STARFORGE_WARM_CLIENT"] = "0"

# Property tests run on loaded CI machines and laptops: time is not what they test, so no
# deadline and no "too slow" health check (a busy machine failed them). HYPOTHESIS_PROFILE=dev
# brings Hypothesis's defaults back when timing a strategy on purpose.
settings.register_profile(
    "ci",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.register_profile("dev", settings.get_profile("default"))
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> object:
        return json.loads(self.out)


@pytest.fixture(autouse=True, scope="session")
def _never_the_real_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Whatever a test forgets, nothing it runs may touch the user's ~/.starforge."""
    saved = os.environ.get("STARFORGE_HOME")
    os.environ["STARFORGE_HOME"] = str(tmp_path_factory.mktemp("default-home"))
    # A server running as root (as in CI) gives each run a uid of its own, which cannot enter
    # pytest's 0700 temporary folders: every server the suite starts runs jobs as its own user
    # instead. So they cannot keep two users' jobs apart, and opt out of the refusal of members'
    # runs that brings (services/access/isolation.py), as an admin would. The tests of isolation
    # (tests/security) start servers with settings of their own.
    saved_env = {k: os.environ.get(k) for k in ("STARFORGE_JOB_USER", "STARFORGE_ISOLATION")}
    os.environ["STARFORGE_JOB_USER"] = ""
    os.environ["STARFORGE_ISOLATION"] = "none"
    yield
    for key, value in saved_env.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    if saved is None:
        os.environ.pop("STARFORGE_HOME", None)
    else:
        os.environ["STARFORGE_HOME"] = saved


@pytest.fixture(autouse=True, scope="session")
def _forked_servers() -> Iterator[None]:
    """Embedded servers start forked from one preloaded python (tests/forked_servers.py)."""
    launcher = forked_servers.install()
    yield
    forked_servers.uninstall(launcher)


@pytest.fixture(autouse=True, scope="session")
def _shared_tiny_inputs(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Built experiment inputs (tests/tiny_inputs.py) live beside the workers' temp folders, so
    both xdist workers of a session share one build of each; in ``STARFORGE_TEST_INPUTS`` when
    set, so that the test command's second session reuses the first one's."""
    shared = os.environ.get("STARFORGE_TEST_INPUTS")
    if shared:
        tiny_inputs.set_cache_root(Path(shared))
        return
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # base is the session's folder's popen-gwN
        base = base.parent
    tiny_inputs.set_cache_root(base / "tiny-inputs")


@pytest.fixture
def sf_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "sf-home"
    monkeypatch.setenv("STARFORGE_HOME", str(home))
    monkeypatch.delenv("STARFORGE_SERVER", raising=False)
    monkeypatch.delenv("STARFORGE_TOKEN", raising=False)
    return home


@pytest.fixture
def sf(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, sf_home: Path
) -> Callable[..., Result]:
    """Run ``sf ARGS...`` in-process (optionally in ``cwd``) and capture what it printed.

    It depends on ``sf_home``, so no test ever talks to the real ``~/.starforge``.
    """

    def run(*args: str, cwd: Path | None = None) -> Result:
        if cwd is not None:
            monkeypatch.chdir(cwd)
        capsys.readouterr()
        code = main(list(args))
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


def git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=root, check=True, capture_output=True, text=True
    ).stdout


def commit_all(root: Path, message: str = "work") -> None:
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", message)


@pytest.fixture
def new_lab(tmp_path: Path) -> Iterator[Callable[..., lab.Lab]]:
    """Make a lab in a real git repo, optionally with committed experiments."""

    def make(name: str = "lab", experiments_: dict[str, str] | None = None) -> lab.Lab:
        made = lab.init_lab(tmp_path / name)
        for exp, method in (experiments_ or {}).items():
            experiments.new_experiment(made, exp, method)
        if experiments_:
            commit_all(made.root, "add experiments")
        return made

    yield make


# Tests that share one outside resource run one module at a time: the Slurm cluster (its nodes
# and queue are the test's subject) and the PostgreSQL cluster's leader election.
_SERIAL_GROUPS = ("slurm", "postgres")


@pytest.fixture(autouse=True, scope="module")
def _one_module_of_a_resource_at_a_time(request: pytest.FixtureRequest) -> Iterator[None]:
    """A lock per outside resource, held by a module of its tests for as long as it runs (its
    servers included), across the xdist workers. The xdist_group markers below do not keep such
    tests on one worker with this pytest-xdist (checked: a module marked xdist_group still ran
    on gw0 and gw1), and a Slurm test that restarts slurmctld then made another module's
    finished job vanish from squeue."""
    marks = {m.name for m in request.node.iter_markers()}
    groups = [g for g in _SERIAL_GROUPS if g in marks]
    if not groups:
        yield
        return
    with open(Path(tempfile.gettempdir()) / f"starforge-tests-{groups[0]}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The collection order is kept: it spreads the real-training tests among light ones. Moving
    # every slow test to the front (tried) made two trainings share the two cores, each taking
    # two to three times as long, and saved nothing (SQLite pass: 17:05 sorted, 16:44 not).
    for item in items:
        for group in _SERIAL_GROUPS:
            if item.get_closest_marker(group) is not None:
                item.add_marker(pytest.mark.xdist_group(group))
                break
