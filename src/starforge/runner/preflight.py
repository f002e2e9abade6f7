"""Preflight inside the job: the image must hold the exact packages the method's runtime pins.

A wrong or missing framework fails the attempt before any GPU work, with the fix in the message,
instead of an ImportError deep in a training script.
"""

from __future__ import annotations

from importlib import metadata

from starforge.contract.errors import RunnerError


def check_packages(pins: list[str]) -> None:
    problems = []
    for pin in pins:
        name, _, wanted = pin.partition("==")
        try:
            found = metadata.version(name)
        except metadata.PackageNotFoundError:
            problems.append(f"{name} is not installed (the method needs {pin})")
            continue
        if wanted and found != wanted:
            problems.append(f"{name} {found} is installed; the method needs {pin}")
    if problems:
        raise RunnerError(
            "this image cannot run the method: " + "; ".join(problems),
            hint="use an image with the method's runtime (`sf methods METHOD` lists its pins), "
            "or pick another --framework-version",
        )
