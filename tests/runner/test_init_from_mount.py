"""A job in a container sees its ``--init-from`` artifact: the parent's folder, read-only."""

from __future__ import annotations

import pytest

from starforge.contract.env import Binding
from starforge.runner.container import Mount, parent_artifact_mounts

ROOT = "/s"
RUN = f"{ROOT}/runs/alice/proj/dpo/r-child00001"
WORK = f"{RUN}/work"


def binding() -> Binding:
    return Binding(
        run_id="r-child00001",
        attempt=1,
        user="alice",
        storage_root=ROOT,
        run_dir=RUN,
        work_dir=WORK,
        out_dir=f"{RUN}/out",
        log_path=f"{RUN}/logs/attempt-1.log",
    )


def test_the_parents_checkpoint_is_mounted_read_only_at_its_path() -> None:
    parent = f"{ROOT}/runs/alice/proj/sft/r-parent0001/out/checkpoints/checkpoint-20"
    assert parent_artifact_mounts(binding(), {"FORGE_MODEL": parent}) == [
        Mount(parent, parent, read_only=True)
    ]


@pytest.mark.parametrize(
    "model",
    [
        "",
        "org/tiny",  # a hub id
        f"{WORK}/models/tiny-llama",  # in the package: mounted with the work dir
        "/etc",  # not under the storage root's runs
        f"{ROOT}/runs/../../etc",
    ],
)
def test_nothing_else_is_mounted_for_the_model(model: str) -> None:
    assert parent_artifact_mounts(binding(), {"FORGE_MODEL": model}) == []
