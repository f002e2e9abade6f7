"""Earlier releases of StarForge, each built from git into a venv of its own.

Which releases: every one ``releases.toml`` records from ``MIN_CLIENT_VERSION`` (the oldest client
this server accepts) up to this version, and always the newest before it (:func:`tested`). Its
commit: the tag ``v<version>`` where the checkout has it, else the commit recorded in
``releases.toml`` (a fresh clone may carry no tags). :func:`tags` reads the release tags a clone
has, so that tests/test_release.py can hold them to the record.

How it is built, offline: ``git archive`` of the commit's ``pyproject.toml``, ``README.md`` and
``src/`` into a folder; ``pip wheel --no-deps --no-build-isolation --no-index`` with the project's
venv; a venv made by the project venv's interpreter, without pip and without system site
packages, into which the project venv's pip installs the wheel. One plain line of a ``.pth``
file puts the project venv's site-packages after the venv's own, so the old release imports the
same dependencies but never today's StarForge: the editable install's finder is started by a
``.pth`` file of that folder, and a path added by a ``.pth`` line has its own ``.pth`` files
left unread. :func:`build` checks that ``starforge`` resolves inside the new venv.

A build is kept under a cache folder by version and commit, made once per session by whichever
xdist worker comes first (the others wait on its lock), so each release tested costs one build of
about 4 s on two cores.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

from starforge import __version__
from starforge.contract import versions
from starforge.contract.api import MIN_CLIENT_VERSION

ROOT = Path(__file__).resolve().parents[1]
RELEASES = ROOT / "releases.toml"


@dataclass(frozen=True)
class Release:
    """A previous release installed in a venv of its own."""

    version: str
    commit: str
    venv: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def sf(self) -> Path:
        return self.venv / "bin" / "sf"


def recorded() -> dict[str, str]:
    """Every release in ``releases.toml``: version -> the full commit it was cut from."""
    with RELEASES.open("rb") as fh:
        table = tomllib.load(fh)["releases"]
    return {str(v): str(c) for v, c in table.items()}


def previous_version(current: str = __version__) -> str | None:
    """The newest recorded release before ``current`` (None before the first)."""
    older = [v for v in recorded() if versions.older(v, current)]
    return max(older, key=lambda v: versions.parse(v) or ()) if older else None


def tested(current: str = __version__, oldest: str = MIN_CLIENT_VERSION) -> list[str]:
    """The releases the compatibility tests build, oldest first: each recorded one before
    ``current`` that is not older than ``oldest`` (every client the server still accepts), and
    the newest before ``current`` even when the minimum has passed it (its client must then get
    the one-line 426)."""
    chosen = {v for v in recorded() if versions.older(v, current) and not versions.older(v, oldest)}
    newest = previous_version(current)
    if newest is not None:
        chosen.add(newest)
    return sorted(chosen, key=lambda v: versions.parse(v) or ())


def _git(*args: str, root: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)


def tagged_commit(version: str) -> str | None:
    """The commit the tag ``v<version>`` names in this checkout; None when it has no such tag."""
    done = _git("rev-parse", "--verify", "--quiet", f"refs/tags/v{version}^{{commit}}")
    return done.stdout.strip() if done.returncode == 0 else None


@dataclass(frozen=True)
class Tag:
    """A release tag ``v<version>`` of this clone."""

    version: str
    commit: str  # the commit it names (peeled)
    annotated: bool  # a tag object (git tag -a), not a bare ref


def tags(root: Path = ROOT) -> dict[str, Tag]:
    """Every ``v<version>`` tag the clone at ``root`` has, by version (empty without tags)."""
    form = "%(refname:strip=2) %(objecttype) %(objectname) %(*objectname)"
    done = _git("for-each-ref", f"--format={form}", "refs/tags/v*", root=root)
    assert done.returncode == 0, done.stderr
    found: dict[str, Tag] = {}
    for line in done.stdout.splitlines():
        name, kind, target, *peeled = line.split()
        version = name.removeprefix("v")
        if versions.parse(version) is None:
            continue  # a tag of another kind (v-next, vendor): no release
        commit = peeled[0] if peeled else target  # a bare ref names its commit itself
        found[version] = Tag(version, commit, kind == "tag")
    return found


def commit_of(version: str) -> str | None:
    """The release's commit, by its tag or else as recorded; None when this clone lacks it."""
    commit = tagged_commit(version) or recorded().get(version)
    if commit is None or _git("cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
        return None
    return commit


def deps_env() -> dict[str, str]:
    """The environment a previous release's process runs in: ours, less what would make its
    interpreter import anything but its own venv (PYTHONPATH, PYTHONHOME)."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


def build(version: str, commit: str, cache: Path) -> Release:
    """The release's venv under ``cache`` (built by the first caller, reused by the rest)."""
    venv = cache / f"starforge-{version}-{commit[:12]}"
    release = Release(version, commit, venv)
    built = venv / "built"  # written last: a folder without it is a build that did not finish
    if built.is_file():
        return release
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / f"{venv.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if built.is_file():
            return release
        shutil.rmtree(venv, ignore_errors=True)
        with tempfile.TemporaryDirectory(prefix=f"{venv.name}-", dir=cache) as work:
            # In place: a venv names its interpreter by path in its scripts, so it cannot move.
            _build_into(commit, Path(work), venv)
        _check_isolated(release)
        built.write_text(f"{version} {commit}\n")
    return release


def _run(*argv: str | Path) -> str:
    done = subprocess.run([str(a) for a in argv], env=deps_env(), capture_output=True, text=True)
    assert done.returncode == 0, f"{argv}: {done.stdout}{done.stderr}"
    return done.stdout


def _build_into(commit: str, work: Path, venv: Path) -> None:
    tree = work / "tree"
    archive = work / "tree.tar"
    _run("git", "-C", ROOT, "archive", "-o", archive, commit, "pyproject.toml", "README.md", "src")
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    ours = Path(sys.executable)
    quiet = ("--quiet", "--disable-pip-version-check", "--no-index")
    _run(ours, "-m", "pip", "wheel", *quiet, "--no-deps", "--no-build-isolation", "-w", work, tree)
    wheel = next(work.glob("starforge-*.whl"))
    _run(ours, "-m", "venv", "--without-pip", venv)
    python = venv / "bin" / "python"
    site = _run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    deps = sysconfig.get_paths()["purelib"]  # the project venv's: every pinned dependency
    (Path(site.strip()) / "starforge-deps.pth").write_text(f"{deps}\n")
    _run(ours, "-m", "pip", "--python", python, "install", *quiet, "--no-deps", wheel)


def _check_isolated(release: Release) -> None:
    """The venv imports the release's own StarForge, never the project's."""
    where = _run(release.python, "-c", "import starforge; print(starforge.__file__)").strip()
    assert Path(where).is_relative_to(release.venv), f"starforge imported from {where}"
    printed = _run(release.sf, "--version").strip()
    assert printed == f"sf {release.version}", printed
