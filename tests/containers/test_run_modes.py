"""Which container mode a server runs with, and what it means for a run's image.

A machine without podman is made by a PATH that has none (the probe is per process, cleared).
What admission does with an image in each mode is in test_images_registry.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from starforge.server import containers


@pytest.fixture
def no_podman(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("PATH", str(tmp_path))
    containers.podman_works.cache_clear()
    yield
    containers.podman_works.cache_clear()


@pytest.mark.usefixtures("no_podman")
def test_unset_on_a_machine_without_podman_means_none_and_jobs_run_on_the_host() -> None:
    assert containers.mode_in_effect(None) == "none"
    assert containers.runtime_for_runs(None) == ""
    assert containers.describe(None) == "none (detected): jobs with --image run on the host"


@pytest.mark.usefixtures("no_podman")
def test_required_without_podman_gives_runners_no_runtime_and_says_podman_does_not_work() -> None:
    assert containers.runtime_for_runs("required") == ""
    assert containers.describe("required") == (
        "required (set): jobs run inside their image; podman does NOT work on this machine"
    )


def test_a_setting_wins_over_the_probe() -> None:
    assert containers.mode_in_effect("none") == "none"
    assert containers.runtime_for_runs("none") == ""
    assert containers.runtime_for_runs("podman") == "podman"


def test_the_catalog_image_applies_only_where_containers_are_configured() -> None:
    assert [containers.uses_catalog_images(s) for s in (None, "none", "podman", "required")] == [
        False,
        False,
        True,
        True,
    ]
