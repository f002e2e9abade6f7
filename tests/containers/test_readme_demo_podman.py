"""The README's demo on a machine that has podman and a server whose ``containers`` is unset.

The suite sets ``STARFORGE_CONTAINERS=none`` for every server it starts (tests/conftest.py); a
researcher's machine does not, and there the server's probe finds podman. This test unsets it
for its own embedded server and runs the README's tiny GRPO path, as a user types it, to
``succeeded``: the catalog's image does not apply to a server that was never told to use
containers (server/containers.py ``uses_catalog_images``), so the run needs no registry and runs
on the host.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from starforge.project import experiments
from starforge.project.lab import Lab
from tests.conftest import Result, commit_all
from tests.integration.conftest import wait_for
from tests.tiny_inputs import prepare_experiment

pytestmark = [
    pytest.mark.containers,
    pytest.mark.integration,
    pytest.mark.training,
    pytest.mark.usefixtures("podman"),
]


def test_the_readmes_grpo_demo_succeeds_on_a_podman_host_whose_server_leaves_containers_unset(
    sf: Callable[..., Result], new_lab: Callable[..., Lab], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("STARFORGE_CONTAINERS", raising=False)
    lab = new_lab()
    experiments.new_experiment(lab, "grpo-demo", "trl/grpo")
    prepare_experiment(lab.root, "grpo-demo")
    commit_all(lab.root, "add grpo-demo")
    got = sf(
        "submit", "grpo-demo", "--profile", "h200:1",
        "--model", "models/tiny-llama", "--train-data", "data/train.jsonl",
        "--validation-data", "data/val.jsonl", "--follow",
        # The README's command, cut to 3 steps: what is tested is where it runs, not the reward.
        "-s", "max_steps=3", "-s", "eval_steps=1000", cwd=lab.root,
    )  # fmt: skip
    assert got.code == 0, got.err + got.out[-3000:]
    # The server found podman by itself, and still ran the demo on the host.
    server: Any = sf("server", "status", "--json").json()
    assert "podman (detected)" in str(server), server
    runs: Any = sf("job", "ls", "--json").json()
    [run] = runs
    done = wait_for(sf, str(run["run_id"]), {"succeeded", "failed", "stopped"})
    assert done["status"] == "succeeded", done
    assert not done.get("image"), done
    assert any(ln.startswith("[summary] ") for ln in got.out.splitlines())
