"""Resources end to end: a real server on a declared virtual inventory (two nodes of 8 x h200,
one of 2 x h100), real runners, real git, ``sf`` as the user types it.

Jobs wait for a gate file the test creates, so the test decides when each run ends and asserts
only on order and numbers, never on durations.
"""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from starforge.project import experiments
from starforge.project.lab import Lab
from tests.conftest import Result, commit_all
from tests.integration.conftest import embedded_server, wait_for

pytestmark = pytest.mark.integration
IMAGE = "registry.example/train:v1"
CURVES = "https://wandb.example/team/lab"
INVENTORY = [
    {"name": "h200-1", "series": "h200", "gpus": 8},
    {"name": "h200-2", "series": "h200", "gpus": 8},
    {"name": "h100-1", "series": "h100", "gpus": 2},
]
GATED = """#!/usr/bin/env bash
set -euo pipefail
echo "on GPUs $CUDA_VISIBLE_DEVICES of node $NODE_RANK/$NNODES"
while [[ ! -e "{gates}/$FORGE_RUN_ID" ]]; do sleep 0.05; done
echo released
"""
ALLREDUCE = """import datetime
import os

import torch
import torch.distributed as dist

os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
rank, world = int(os.environ["NODE_RANK"]), int(os.environ["NNODES"])
dist.init_process_group(
    "gloo", init_method="env://", rank=rank, world_size=world,
    timeout=datetime.timedelta(seconds=300),
)
value = torch.tensor([float(rank + 1)])
dist.all_reduce(value)
print(f"node {rank} of {world} on {os.environ['MASTER_ADDR']}: all-reduce sum = {value.item():g}")
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def server_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with embedded_server(tmp_path_factory.mktemp("sf-resources"), {"inventory": INVENTORY}) as home:
        yield home


@pytest.fixture
def gates(tmp_path: Path) -> Path:
    folder = tmp_path / "gates"
    folder.mkdir()
    return folder


@pytest.fixture
def gated_lab(new_lab: Callable[..., Lab], gates: Path, sf: Callable[..., Result]) -> Iterator[Lab]:
    made = new_lab()
    experiments.new_experiment(made, "g", "custom/custom")
    folder = made.root / "experiments" / "g"
    (folder / "train.sh").write_text(GATED.format(gates=gates))
    (folder / "lab-id.txt").write_text(f"{uuid.uuid4()}\n")
    commit_all(made.root, "a gated job")
    yield made
    # Whatever the test left waiting (a failed assertion), let it end: no runner outlives it.
    runs = sf("job", "ls", "--json", "--limit", "1000").json()
    assert isinstance(runs, list)
    release(gates, *(str(r["run_id"]) for r in runs))
    for r in runs:
        wait_for(sf, str(r["run_id"]), {"succeeded", "failed", "stopped"})


def submit(sf: Callable[..., Result], lab: Lab, profile: str, exp: str = "g") -> Result:
    return sf(
        "submit", exp, "--profile", profile, "--image", IMAGE,
        "--observability-url", CURVES, "--json", cwd=lab.root,
    )  # fmt: skip


def submitted(sf: Callable[..., Result], lab: Lab, profile: str) -> str:
    got = submit(sf, lab, profile)
    assert got.code == 0, got.err
    body = got.json()
    assert isinstance(body, dict)
    return str(body["run_id"])


def view(sf: Callable[..., Result], run_id: str) -> dict:
    got = sf("job", "status", run_id, "--json").json()
    assert isinstance(got, dict)
    return got


def explained(sf: Callable[..., Result], run_id: str, timeout: float = 60.0) -> dict:
    """The run's view once a scheduler pass gave its reason (admission says it waits for one)."""
    deadline = time.monotonic() + timeout
    while True:
        got = view(sf, run_id)
        if not got["reason"].startswith("waiting for the scheduler") or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def release(gates: Path, *run_ids: str) -> None:
    for run_id in run_ids:
        (gates / run_id).touch()


def first_start(v: dict) -> str:
    return str(next(e["at"] for e in v["events"] if e["dst"] == "starting"))


def me(sf: Callable[..., Result]) -> str:
    got = sf("status", "--json").json()
    assert isinstance(got, dict)
    return str(got["me"]["user"])


def test_a_queue_of_mixed_runs_drains_in_order_and_says_why_each_waits(
    sf: Callable[..., Result], gated_lab: Lab, gates: Path
) -> None:
    blocker = submitted(sf, gated_lab, "h200:16")
    assert wait_for(sf, blocker, {"running", "failed"})["status"] == "running"
    wide = submitted(sf, gated_lab, "h200:16")
    narrow = submitted(sf, gated_lab, "h200:8")
    small = submitted(sf, gated_lab, "h200:4")
    other = submitted(sf, gated_lab, "h100:2")
    assert wait_for(sf, other, {"running", "failed"})["status"] == "running"  # backfill

    head = view(sf, wide)
    assert (head["status"], head["queue_position"]) == ("queued", 1)
    assert head["pending"]["next_event"] == f"when {blocker} ends"
    assert head["pending"]["reserved_nodes"] == ["h200-1", "h200-2"]
    assert f"8 used by {blocker} until it ends" in head["pending"]["detail"]
    behind = view(sf, narrow)
    assert behind["queue_position"] == 2
    assert behind["reason"].startswith("waiting for 1 node with 8 free h200 GPUs: 0 are free")
    assert f"kept for {wide}" in behind["pending"]["detail"]
    listed = sf("job", "ls", "--json").json()
    assert isinstance(listed, list)
    positions = {r["run_id"]: r["queue_position"] for r in listed if r["status"] == "queued"}
    assert positions == {wide: 1, narrow: 2, small: 3}
    human = sf("job", "status", wide).out
    assert "position 1 of 3" in human and f"when {blocker} ends" in human

    release(gates, blocker)
    assert wait_for(sf, wide, {"running", "failed"})["status"] == "running"
    assert view(sf, narrow)["status"] == "queued"  # the wide run holds every h200 GPU
    release(gates, wide)
    for run_id in (narrow, small):
        assert wait_for(sf, run_id, {"running", "failed"})["status"] == "running"
    release(gates, narrow, small, other)
    ended = {r: wait_for(sf, r, {"succeeded", "failed"}) for r in (blocker, wide, narrow, small)}
    assert {v["status"] for v in ended.values()} == {"succeeded"}
    starts = {r: first_start(v) for r, v in ended.items()}
    assert starts[blocker] < starts[wide] < min(starts[narrow], starts[small])
    assert first_start(view(sf, other)) < starts[wide]


def test_a_run_over_quota_queues_instead_of_failing_and_starts_when_the_quota_frees(
    sf: Callable[..., Result], gated_lab: Lab, gates: Path
) -> None:
    user = me(sf)
    got = sf("admin", "quota", "set", user, "--max-gpus", "h200=8", "--json")
    assert got.code == 0, got.err
    try:
        first = submitted(sf, gated_lab, "h200:8")
        assert wait_for(sf, first, {"running", "failed"})["status"] == "running"
        second = submitted(sf, gated_lab, "h200:8")
        waiting = explained(sf, second)  # the pass that explains it runs after the submit
        assert waiting["status"] == "queued"
        assert waiting["reason"] == (
            f"your quota: 8 of 8 h200 GPUs in use by runs {first}; this run needs 8"
        )
        status = sf("status", "--json").json()
        assert isinstance(status, dict)
        free = {s["series"]: s["free"] for s in status["cluster"]["series"]}
        assert free["h200"] == 8  # the capacity is there: only the quota holds it back
        assert status["me"]["usage"]["gpus_by_series"] == {"h200": 8}
        assert [r["run_id"] for r in status["me"]["queued_runs"]] == [second]
        human = sf("status").out
        assert "h200: 8 of 8" in human and second in human
        release(gates, first)
        assert wait_for(sf, second, {"running", "failed"})["status"] == "running"
        release(gates, second)
        assert wait_for(sf, second, {"succeeded", "failed"})["status"] == "succeeded"
    finally:
        assert sf("admin", "quota", "set", user, "--reset").code == 0


def test_runs_that_can_never_fit_or_that_the_quota_excludes_are_rejected_with_the_numbers(
    sf: Callable[..., Result], gated_lab: Lab
) -> None:
    before = sf("job", "ls", "--json", "--limit", "500").json()
    too_many = submit(sf, gated_lab, "h200:24")
    assert too_many.code == 2
    assert "needs 3 nodes with 8 h200 GPUs each but the cluster has 2" in too_many.err
    too_wide = submit(sf, gated_lab, "h100:4")
    assert too_wide.code == 2
    assert "needs 4 GPUs per node but the largest h100 node has 2" in too_wide.err
    user = me(sf)
    assert sf("admin", "quota", "set", user, "--allow", "h200").code == 0
    try:
        refused = submit(sf, gated_lab, "h100:1")
        assert refused.code == 2
        assert "does not allow profile h100 (allowed: h200)" in refused.err
    finally:
        assert sf("admin", "quota", "set", user, "--allow", "all").code == 0
    assert sf("job", "ls", "--json", "--limit", "500").json() == before


def test_a_two_node_job_runs_a_real_gloo_all_reduce_across_two_runners(
    sf: Callable[..., Result], new_lab: Callable[..., Lab]
) -> None:
    pytest.importorskip("torch")
    made = new_lab()
    experiments.new_experiment(made, "gloo", "custom/custom")
    folder = made.root / "experiments" / "gloo"
    (folder / "allreduce.py").write_text(ALLREDUCE)
    (folder / "train.sh").write_text(
        f'#!/usr/bin/env bash\nset -euo pipefail\nexec "{sys.executable}" allreduce.py\n'
    )
    commit_all(made.root, "a gloo job")
    run_id = str(submit(sf, made, "h200:16", exp="gloo").json()["run_id"])  # type: ignore[index]
    done = wait_for(sf, run_id, {"succeeded", "failed"}, timeout=300)
    logs = sorted(Path(str(done["run_dir"]), "logs").glob("attempt-1*.log"))
    text = [p.read_text() for p in logs]
    assert done["status"] == "succeeded", "\n".join(text)
    assert [p.name for p in logs] == ["attempt-1.log", "attempt-1.node-1.log"]
    assert "node 0 of 2 on 127.0.0.1: all-reduce sum = 3" in text[0]
    assert "node 1 of 2 on 127.0.0.1: all-reduce sum = 3" in text[1]
    assert [len(a["executor_ref"].split(",")) for a in done["attempts"]] == [2]
