"""The image rules both sides share: resolution order, reference parts, the allowlist."""

from __future__ import annotations

import pytest

from starforge.contract.errors import ImageError
from starforge.contract.images import (
    ImageRef,
    ImageSource,
    check_registry_entry,
    parse_image,
    registry_allowed,
    resolve_image,
)

FLAG = "127.0.0.1:5000/lab/mine:1"
DEFAULT = "ghcr.io/lab/trl:admin"
RUNTIME = "ghcr.io/lab/trl:runtime"
CATALOG = "ghcr.io/starforge-dev/trl:1.16.0"


@pytest.mark.parametrize(
    ("flag", "defaults", "runtimes", "catalog", "expected"),
    [
        (FLAG, {"trl": DEFAULT}, {"trl-1.16": RUNTIME}, CATALOG, (FLAG, ImageSource.FLAG)),
        ("", {"trl": DEFAULT}, {"trl-1.16": RUNTIME}, CATALOG, (DEFAULT, "framework-default")),
        ("", {"verl": DEFAULT}, {"trl-1.16": RUNTIME}, CATALOG, (RUNTIME, "runtime-registry")),
        ("", {}, {"trl-1.15": RUNTIME}, CATALOG, (CATALOG, ImageSource.CATALOG)),
        ("", {}, {}, "", None),
    ],
    ids=["flag-wins", "framework-default", "runtime-registry", "catalog", "none"],
)
def test_the_first_rule_that_names_an_image_decides_and_says_which_it_was(
    flag: str,
    defaults: dict[str, str],
    runtimes: dict[str, str],
    catalog: str,
    expected: tuple[str, str] | None,
) -> None:
    got = resolve_image(
        flag,
        framework="trl",
        runtime_id="trl-1.16",
        framework_defaults=defaults,
        runtime_images=runtimes,
        catalog_image=catalog,
    )
    assert (None if got is None else (got.ref, got.source.value)) == expected


@pytest.mark.parametrize(
    ("ref", "parts"),
    [
        ("127.0.0.1:5000/lab/tiny:1", ("127.0.0.1:5000", "lab/tiny", "1", "")),
        ("127.0.0.1:5000/lab/tiny", ("127.0.0.1:5000", "lab/tiny", "latest", "")),
        ("lab/tiny:2", ("docker.io", "lab/tiny", "2", "")),
        ("ubuntu", ("docker.io", "library/ubuntu", "latest", "")),
        ("localhost/tiny:1", ("localhost", "tiny", "1", "")),
        ("ghcr.io/a/b@sha256:" + "a" * 64, ("ghcr.io", "a/b", "", "sha256:" + "a" * 64)),
    ],
)
def test_a_reference_splits_into_registry_repository_tag_and_digest(
    ref: str, parts: tuple[str, str, str, str]
) -> None:
    assert parse_image(ref) == ImageRef(*parts)


@pytest.mark.parametrize(
    ("ref", "entries", "allowed"),
    [
        ("evil.io/x:1", [], True),  # no entries: every registry
        ("ghcr.io/lab/trl:1", ["ghcr.io"], True),
        ("ghcr.io/lab/trl:1", ["ghcr.io/lab"], True),
        ("ghcr.io/laboratory/trl:1", ["ghcr.io/lab"], False),  # a prefix is whole components
        ("ghcr.io/other/trl:1", ["ghcr.io/lab"], False),
        ("127.0.0.1:5000/lab/tiny:1", ["127.0.0.1:5000"], True),
        ("127.0.0.1:5001/lab/tiny:1", ["127.0.0.1:5000"], False),  # the port is part of it
        ("ubuntu:24.04", ["docker.io/library"], True),
        ("ubuntu:24.04", ["ghcr.io"], False),
    ],
)
def test_an_entry_allows_its_registry_or_the_repositories_under_its_prefix(
    ref: str, entries: list[str], allowed: bool
) -> None:
    assert registry_allowed(parse_image(ref), entries) is allowed


def test_an_allowlist_entry_is_normalised_and_a_malformed_one_is_refused() -> None:
    assert check_registry_entry("GHCR.io/lab/") == "ghcr.io/lab"
    assert check_registry_entry("127.0.0.1:5000") == "127.0.0.1:5000"
    with pytest.raises(ImageError, match="HOST"):
        check_registry_entry("https://ghcr.io")
