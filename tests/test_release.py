"""The release's numbers agree everywhere: the package, pyproject.toml, the changelog, the record
of releases and their tags, and the oldest client and server this one speaks to."""

from __future__ import annotations

import re
import subprocess
import tomllib
from collections.abc import Callable
from pathlib import Path

from starforge import __version__
from starforge.contract import versions
from starforge.contract.api import MIN_CLIENT_VERSION, MIN_SERVER_VERSION
from tests import previous_release
from tests.conftest import Result

ROOT = previous_release.ROOT


def test_the_package_and_pyproject_name_one_version() -> None:
    with (ROOT / "pyproject.toml").open("rb") as fh:
        assert tomllib.load(fh)["project"]["version"] == __version__


def test_sf_version_prints_it(sf: Callable[..., Result]) -> None:
    printed = sf("--version")
    assert (printed.code, printed.out) == (0, f"sf {__version__}\n")


def test_the_changelog_opens_with_this_version_and_lists_every_recorded_release() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    headings = re.findall(r"^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?$", text, re.MULTILINE)
    listed = [version for version, _ in headings if version != "Unreleased"]
    assert listed[0] == __version__
    assert set(previous_release.recorded()) <= set(listed)
    assert listed == sorted(listed, key=lambda v: versions.parse(v) or (), reverse=True)


def test_every_recorded_release_is_older_than_this_one_and_names_a_full_commit() -> None:
    """What a clone without tags (CI may clone so) has to go on: releases.toml alone."""
    for version, commit in previous_release.recorded().items():
        assert re.fullmatch(r"[0-9a-f]{40}", commit), f"{version}: a full commit hash"
        assert versions.older(version, __version__) or version == __version__


def test_a_clone_with_tags_has_each_releases_annotated_tag_on_its_recorded_commit() -> None:
    tags = previous_release.tags()
    if not tags:
        return  # a clone without tags: the record above is all there is to check
    for version, commit in previous_release.recorded().items():
        assert version in tags, f"releases.toml records {version}, but the clone has no v{version}"
        tag = tags[version]
        assert tag.commit == commit, f"v{version} names {tag.commit}, releases.toml {commit}"
        assert tag.annotated, f"v{version} is a bare ref: git tag -a v{version} {commit}"
    # A tag is recorded in the commit after it, so only this version's may be unrecorded yet.
    unrecorded = set(tags) - set(previous_release.recorded()) - {__version__}
    assert not unrecorded, f"tagged but not in releases.toml: {sorted(unrecorded)}"


def test_the_oldest_client_and_server_spoken_to_are_releases_up_to_this_one() -> None:
    known = {*previous_release.recorded(), __version__}
    for oldest in (MIN_CLIENT_VERSION, MIN_SERVER_VERSION):
        assert oldest in known
        assert not versions.older(__version__, oldest)


def test_a_clone_without_tags_has_none_to_check_and_a_bare_tag_is_told_apart(
    tmp_path: Path,
) -> None:
    """The two kinds of clone the check above meets, in a real clone of this one."""
    clone = tmp_path / "clone"
    git = ("git", "-c", "advice.detachedHead=false")
    subprocess.run(
        [*git, "clone", "--quiet", "--no-tags", "--no-checkout", ROOT, clone], check=True
    )
    assert previous_release.tags(clone) == {}
    first, commit = min(
        previous_release.recorded().items(), key=lambda r: versions.parse(r[0]) or ()
    )
    subprocess.run([*git, "-C", clone, "cat-file", "-e", f"{commit}^{{commit}}"], check=True)
    subprocess.run([*git, "-C", clone, "tag", f"v{first}", commit], check=True)
    subprocess.run([*git, "-C", clone, "tag", "vendor-drop", commit], check=True)
    tag = previous_release.Tag(first, commit, annotated=False)
    assert previous_release.tags(clone) == {first: tag}
