"""The server's container runtime: which mode is in effect, and what it means for a run's image.

``containers`` in the settings (``STARFORGE_CONTAINERS``) is ``podman`` (jobs with an image run
inside it), ``none`` (jobs run on the host; an image is recorded but not used, and the run's log
says so) or ``required`` (like ``podman``, but a run with an image is refused at admission when
podman does not work here). Unset: ``podman`` when ``podman info`` works on this machine, else
``none``. The probe runs once per process (it forks podman, ~0.1–1 s) and is cached.

The catalog's image (the last rule of the resolution order) is used only where ``containers`` is
set: a server that merely detected podman runs in images that someone chose (``--image``, an
admin's framework default, ``runtime_images``), so an offline laptop with podman installed keeps
running catalog methods on the host instead of failing to reach the catalog's registry.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from typing import Literal

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
    which = "their image" if setting is not None else "the image they name (not the catalog's)"
    return f"{mode} ({source}): jobs run inside {which}; {works}"


def uses_catalog_images(setting: Mode | None) -> bool:
    """Whether the catalog's image applies: only on a server whose containers are configured."""
    return setting in ("podman", "required")
