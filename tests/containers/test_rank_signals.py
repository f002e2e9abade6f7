"""A stop or pause of a distributed run in its image reaches every rank: the runner hands SIGTERM
to the ranks inside the container through ``podman exec`` (runner/ranks.py), as torchrun, which
ignores it there as on the host, would not."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Callable, Iterator

import pytest

from starforge.runner import ranks
from tests.containers.conftest import make_image

pytestmark = [pytest.mark.containers, pytest.mark.usefixtures("podman")]

# A rank (its own SIGTERM handler) started by a launcher that then ignores SIGTERM, as the
# compiled torchrun plan does; catatonit (--init) is PID 1, as in a job's container.
RANK = (
    'trap "echo got > /tmp/got; exit 143" TERM; echo $$ > /tmp/rank; '
    "while :; do busybox sleep 1; done"
)
LAUNCHER = f"""
sh -c '{RANK}' &
trap "" TERM
echo $$ > /tmp/launcher
wait
busybox sleep 600
"""


def wait_until(check: Callable[[], bool], what: str, limit_s: float = 60.0) -> None:
    deadline = time.monotonic() + limit_s
    while not check():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.1)


def read(name: str, path: str) -> str:
    done = subprocess.run(
        ["podman", "exec", name, "busybox", "cat", path],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() if done.returncode == 0 else ""


@pytest.fixture
def container() -> Iterator[str]:
    name = f"sf-test-ranks-{uuid.uuid4().hex[:8]}"
    image = make_image({})
    subprocess.run(
        ["podman", "run", "-d", "--init", "--name", name, image, "sh", "-c", LAUNCHER],
        check=True,
        capture_output=True,
    )
    yield name
    subprocess.run(["podman", "rm", "-f", "--time", "0", name], capture_output=True, check=False)


def test_the_ranks_in_a_container_get_sigterm_and_the_launcher_that_ignores_it_does_not(
    container: str,
) -> None:
    started = lambda: bool(read(container, "/tmp/rank") and read(container, "/tmp/launcher"))  # noqa: E731
    wait_until(started, "the launcher and its rank")
    rank, launcher = read(container, "/tmp/rank"), read(container, "/tmp/launcher")
    forwarder = ranks.ContainerTermForwarder(container)
    forwarder.start()
    try:
        wait_until(lambda: read(container, "/tmp/got") == "got", "the rank to hear SIGTERM")
    finally:
        forwarder.stop()
    assert int(rank) in forwarder._told and int(launcher) not in forwarder._told
    alive = subprocess.run(
        ["podman", "exec", container, "busybox", "kill", "-0", launcher],
        capture_output=True,
        check=False,
    )
    assert alive.returncode == 0  # it ignores SIGTERM: never told, still there
