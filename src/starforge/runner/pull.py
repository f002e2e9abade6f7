"""The pull of a run's image before its container starts, with the login of its registry.

When the image is not on the node yet (``podman image exists``), the runner asks the control plane
for the login of the image's registry (``POST /runs/{id}/registry-auth`` with its run token; an
answer without one when the server holds none) and pulls the image itself, as the runner, before
``podman run`` (which then finds it). Guarantees:

- the login reaches podman only through an auth file (``--authfile``), written 0600 by the runner
  (the job's uid cannot read it) in the run's ``state`` folder (never mounted into the container,
  closed to the job), and removed as soon as the pull ends, whatever its outcome; a file an earlier
  runner of the same node left behind (killed mid-pull) is removed before the next one is written;
- never on podman's command line (every host user reads it in ``ps``), never in the job's
  environment, never in the log: the log names the registry whose login was used, and a podman
  error is logged with the password masked;
- a registry the server speaks plain HTTP to (a loopback address, ``insecure_registries``) is
  pulled from with ``--tls-verify=false``, as admission spoke to it.

A runner with no server to ask (reports off) leaves the pull to ``podman run``, as before.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from starforge.client.registries import for_run
from starforge.contract.env import Binding
from starforge.contract.errors import RunnerError, ServerUnreachable, StarForgeError
from starforge.contract.layout import RunLayout
from starforge.contract.registries import RunRegistryAuth, auth_file
from starforge.runner.report import client_for

FETCH_TRIES = 4
PULL_TIMEOUT_S = 6 * 3600.0  # a training image is tens of GB; a stuck pull still ends
ERROR_LINES = 5  # podman's last lines of a failed pull, in the run's log


def image_present(image: str) -> bool:
    done = subprocess.run(["podman", "image", "exists", image], capture_output=True, check=False)
    return done.returncode == 0


def pull_argv(image: str, *, tls_verify: bool, authfile: str = "") -> list[str]:
    """``podman pull`` of the image (pure: no credential is ever in it, only the file's path)."""
    argv = ["podman", "pull", "--quiet"]
    if not tls_verify:
        argv.append("--tls-verify=false")
    if authfile:
        argv += ["--authfile", authfile]
    return [*argv, image]


def auth_path(b: Binding) -> Path:
    return RunLayout(Path(b.run_dir)).state / f"attempt-{b.attempt}.node-{b.node_rank}.auth.json"


def fetch(b: Binding, url: str) -> RunRegistryAuth:
    """The login of the image's registry for this attempt, with a few retries while the server
    is away."""
    for attempt in range(FETCH_TRIES):
        try:
            with client_for(b, url) as client:
                return for_run(client, b.run_id, b.attempt, b.node_rank)
        except ServerUnreachable:
            if attempt == FETCH_TRIES - 1:
                raise
            time.sleep(0.5 * 2**attempt)
        except StarForgeError as exc:
            raise RunnerError(
                f"the server refused this attempt's registry login: {exc.message}"
            ) from None
    raise RunnerError("the server did not answer for this attempt's registry login")


def write_auth_file(path: Path, auth: RunRegistryAuth) -> None:
    """The login in a containers-auth.json only the runner's uid reads (0600 from its creation)."""
    path.unlink(missing_ok=True)  # an earlier runner's, killed before it removed its own
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(auth_file(auth.registry, auth.username, auth.password), fh)


def pull(b: Binding, url: str, say: Callable[[str], None]) -> None:
    """Pull the binding's image unless the node has it; raise RunnerError when the pull fails."""
    if image_present(b.image):
        return
    auth = fetch(b, url)
    if auth.withheld:
        say(auth.withheld)
    authfile = auth_path(b) if auth.has_login else None
    used = f" with the login stored for {auth.registry}" if authfile is not None else ""
    say(f"pulling the image {b.image}{used}")
    try:
        if authfile is not None:
            write_auth_file(authfile, auth)
        argv = pull_argv(b.image, tls_verify=auth.tls_verify, authfile=str(authfile or ""))
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=PULL_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        raise RunnerError(f"the pull of {b.image} took over {PULL_TIMEOUT_S:.0f} s") from None
    finally:
        if authfile is not None:
            authfile.unlink(missing_ok=True)
    if done.returncode != 0:
        said = done.stderr.strip().splitlines()[-ERROR_LINES:]
        text = "\n".join(said).replace(auth.password, "***") if auth.password else "\n".join(said)
        hint = (
            f" (an admin stores a login with `sf admin registry login {auth.registry}`)"
            if not auth.has_login and auth.registry
            else ""
        )
        raise RunnerError(f"could not pull the image {b.image}{hint}: {text}")
