"""Which container mode a server runs with, and what it means for a submission with an image.

A machine without podman is made by a PATH that has none (the probe is per process, cleared)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from starforge.contract.errors import Rejected
from starforge.server import containers


@pytest.fixture
def no_podman(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("PATH", str(tmp_path))
    containers.podman_works.cache_clear()
    yield
    containers.podman_works.cache_clear()


@pytest.mark.usefixtures("no_podman")
def test_unset_on_a_machine_without_podman_means_none_and_the_image_is_not_used() -> None:
    assert containers.mode_in_effect(None) == "none"
    assert containers.runtime_for_runs(None) == ""
    assert containers.describe(None) == "none (detected): jobs with --image run on the host"
    assert containers.submit_warnings(None, "tiny:1") == [
        "the image tiny:1 is not used: this server has no container runtime "
        "(containers: none), so the job runs on the host"
    ]
    containers.check_admission(None, "tiny:1")  # admitted: it runs on the host


@pytest.mark.usefixtures("no_podman")
def test_required_without_podman_refuses_a_run_with_an_image_and_says_how_to_fix_it() -> None:
    with pytest.raises(Rejected) as caught:
        containers.check_admission("required", "lab/tiny:1")
    assert caught.value.exit_code == 2
    assert "requires containers, but podman does not work here" in caught.value.message
    assert "scripts/podman.sh install" in (caught.value.hint or "")
    containers.check_admission("required", "")  # a run without an image is not concerned


def test_a_setting_wins_over_the_probe() -> None:
    assert containers.mode_in_effect("none") == "none"
    assert containers.runtime_for_runs("none") == ""
    assert containers.submit_warnings("podman", "tiny:1") == []
    assert containers.runtime_for_runs("podman") == "podman"
