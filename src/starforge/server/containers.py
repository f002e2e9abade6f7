"""The server's container runtime: which mode is in effect, and what it means for a run's image.

``containers`` in the settings (``STARFORGE_CONTAINERS``) is ``podman`` (jobs with an image run
inside it), ``none`` (jobs run on the host; an image is recorded but not used, and the run's log
says so) or ``required`` (like ``podman``, but a run with an image is refused at admission when
podman does not work here). Unset: ``podman`` when ``podman info`` works on this machine, else
``none``. The probe runs once per process (it forks podman, ~0.1–1 s) and is cached.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from typing import Literal

from starforge.contract.errors import Rejected

Mode = Literal["podman", "none", "required"]
_PROBE_TIMEOUT_S = 30.0


@functools.cache
def podman_works() -> bool:
    """Whether ``podman info`` answers on this machine (probed once per process)."""
    if shutil.which("podman") is None:
        return False
    try:
        done = subprocess.run(
            ["podman", "info", "--format", "{{.Host.OCIRuntime.Name}}"],
            capture_output=True,
            timeout=_PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def mode_in_effect(setting: Mode | None) -> Mode:
    """The mode the server runs with: the setting, or what the machine allows when unset."""
    if setting is not None:
        return setting
    return "podman" if podman_works() else "none"


def runtime_for_runs(setting: Mode | None) -> str:
    """What a binding's ``containers`` says: "podman" when jobs run inside their image."""
    mode = mode_in_effect(setting)
    if mode == "none":
        return ""
    if mode == "required" and not podman_works():
        return ""  # admission refuses runs with an image; none reach a runner
    return "podman"


def describe(setting: Mode | None) -> str:
    """One line for ``sf server status``."""
    mode = mode_in_effect(setting)
    source = "set" if setting is not None else "detected"
    if mode == "none":
        return f"none ({source}): jobs with --image run on the host"
    works = "podman works" if podman_works() else "podman does NOT work on this machine"
    return f"{mode} ({source}): jobs with --image run inside it; {works}"


def submit_warnings(setting: Mode | None, image: str) -> list[str]:
    """What ``sf submit`` says about a run's image on this server (nothing when it is used)."""
    if image and runtime_for_runs(setting) == "":
        return [f"the image {image} is not used: this server has no container runtime "
                "(containers: none), so the job runs on the host"]  # fmt: skip
    return []


def check_admission(setting: Mode | None, image: str) -> None:
    """Refuse a run with an image that cannot run in it because ``required`` has no runtime."""
    if not image or mode_in_effect(setting) != "required" or podman_works():
        return
    raise Rejected(
        f"this server requires containers, but podman does not work here, so the image "
        f"{image} cannot be run",
        hint="install podman on the server (scripts/podman.sh install), or set containers: "
        "podman|none in server.yaml",
        details={"image": image, "containers": "required"},
    )
