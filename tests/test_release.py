"""The release's numbers agree everywhere: the package, pyproject.toml, the changelog, the record
of releases and their tags, and the oldest client and server this one speaks to."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable

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


def test_every_recorded_release_is_older_than_this_one_and_its_tag_agrees() -> None:
    for version, commit in previous_release.recorded().items():
        assert re.fullmatch(r"[0-9a-f]{40}", commit), f"{version}: a full commit hash"
        assert versions.older(version, __version__) or version == __version__
        tagged = previous_release.tagged_commit(version)
        assert tagged in (None, commit), f"v{version} names {tagged}, releases.toml {commit}"


def test_the_oldest_client_and_server_spoken_to_are_releases_up_to_this_one() -> None:
    known = {*previous_release.recorded(), __version__}
    for oldest in (MIN_CLIENT_VERSION, MIN_SERVER_VERSION):
        assert oldest in known
        assert not versions.older(__version__, oldest)
