"""Every node's log of a two-node run through ``sf`` and a real server (two virtual nodes of 8 x
h200, one runner per node): history, tail, follow, ``--node`` and ``--json``, and a follow that
drops its connection mid-run and resumes by event id without losing or repeating a line.

The jobs wait for a gate file the test creates, so the test decides when each run goes on, and
asserts only on lines and their order, never on durations.
"""

from __future__ import annotations

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
]
# Each node counts to LINES, waits at HALF for the gate (so the test can act on a live run),
# and node 1 ends with the error a user must be able to see.
TRAIN = """#!/usr/bin/env bash
set -euo pipefail
echo "hello from node $NODE_RANK of $NNODES"
for i in $(seq 1 {lines}); do
  if [[ $i == {half} ]]; then
    while [[ ! -e "{gates}/$FORGE_RUN_ID" ]]; do sleep 0.05; done
  fi
  echo "node $NODE_RANK line $i"
done
if [[ "$NODE_RANK" == 1 ]]; then echo "NCCL error: unhandled system error (rank 1)"; fi
"""
LINES = 60


@pytest.fixture(scope="module")
def server_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("sf-lognodes")
    with embedded_server(home, {"inventory": INVENTORY}) as started:
        yield started


@pytest.fixture
def gates(tmp_path: Path) -> Path:
    folder = tmp_path / "gates"
    folder.mkdir()
    return folder


@pytest.fixture
def ranks_lab(new_lab: Callable[..., Lab], gates: Path, sf: Callable[..., Result]) -> Iterator[Lab]:
    made = new_lab()
    experiments.new_experiment(made, "ranks", "custom/custom")
    folder = made.root / "experiments" / "ranks"
    script = TRAIN.format(lines=LINES, half=LINES // 2, gates=gates)
    (folder / "train.sh").write_text(script)
    (folder / "lab-id.txt").write_text(f"{uuid.uuid4()}\n")
    commit_all(made.root, "a job that says its node rank")
    yield made
    # Whatever the test left waiting (a failed assertion), let it end: no runner outlives it.
    runs = sf("job", "ls", "--json", "--limit", "1000").json()
    assert isinstance(runs, list)
    for r in runs:
        (gates / str(r["run_id"])).touch()
    for r in runs:
        wait_for(sf, str(r["run_id"]), {"succeeded", "failed", "stopped"})


def submit_two_nodes(sf: Callable[..., Result], lab: Lab) -> str:
    got = sf(
        "submit", "ranks", "--profile", "h200:16", "--image", IMAGE,
        "--observability-url", CURVES, "--json", cwd=lab.root,
    )  # fmt: skip
    assert got.code == 0, got.err
    body = got.json()
    assert isinstance(body, dict)
    return str(body["run_id"])


def node_lines(node: int) -> list[str]:
    return [f"node {node} line {i}" for i in range(1, LINES + 1)]


def test_a_two_node_runs_logs_show_node_1_labelled_and_node_1_alone(
    sf: Callable[..., Result], ranks_lab: Lab, gates: Path
) -> None:
    run_id = submit_two_nodes(sf, ranks_lab)
    (gates / run_id).touch()
    done = wait_for(sf, run_id, {"succeeded", "failed"})
    history = sf("job", "logs", run_id, "-n", "0", "--no-follow")
    assert done["status"] == "succeeded", history.out
    lines = history.out.splitlines()
    assert "hello from node 0 of 2" in lines
    assert "[node 1] hello from node 1 of 2" in lines
    assert "[node 1] NCCL error: unhandled system error (rank 1)" in lines
    assert [x for x in lines if x.startswith("node ")] == node_lines(0)
    assert [x for x in lines if x.startswith("[node 1] node ")] == [
        f"[node 1] {x}" for x in node_lines(1)
    ]

    alone = sf("job", "logs", run_id, "--node", "1", "-n", "0", "--no-follow").out.splitlines()
    assert (
        "hello from node 1 of 2" in alone and "NCCL error: unhandled system error (rank 1)" in alone
    )
    assert not any("node 0" in x or x.startswith("[node") for x in alone)

    # The tail (the stdlib fast path) and the follow (the stream) show the same nodes.
    tail = sf("job", "logs", run_id, "-n", "3", "--no-follow").out.splitlines()
    assert len(tail) == 6  # each node's last 3 lines: the job's, then its runner's exit line
    assert tail[:2] == [f"node 0 line {LINES - 1}", f"node 0 line {LINES}"]
    assert tail[3:5] == [
        f"[node 1] node 1 line {LINES}",
        "[node 1] NCCL error: unhandled system error (rank 1)",
    ]
    assert "node 1 exited with code 0" in tail[5] and tail[5].startswith("[node 1] ")
    one_tail = sf("job", "logs", run_id, "--node", "1", "-n", "2", "--no-follow").out
    assert one_tail.startswith("NCCL error: unhandled system error (rank 1)\n")
    followed = sf("job", "logs", run_id, "-n", "0")
    assert followed.code == 0, followed.err
    assert sorted(followed.out.splitlines()) == sorted(lines)

    as_json = sf("job", "logs", run_id, "--json").json()
    assert isinstance(as_json, dict)
    (attempt,) = as_json["attempts"]  # type: ignore[misc]
    assert [n["node"] for n in attempt["nodes"]] == [0, 1]
    assert attempt["log"] == history.out
    assert "NCCL error" in attempt["nodes"][1]["log"] and "[node" not in attempt["nodes"][1]["log"]

    missing = sf("job", "logs", run_id, "--node", "2", "--no-follow")
    assert missing.code == 1 and "it ran on 2 nodes" in missing.err


def test_a_follow_that_reconnects_mid_run_neither_drops_nor_repeats_a_line(
    sf: Callable[..., Result], ranks_lab: Lab, gates: Path
) -> None:
    from starforge.cli.connect import connect

    run_id = submit_two_nodes(sf, ranks_lab)
    texts = {0: "", 1: ""}
    with connect(start=False) as client:
        first = client.stream_logs(run_id)
        events = iter(first)
        # Read until both nodes have written lines before their gate, then drop the connection
        # while the run still goes on.
        for event in events:
            if event.event == "log":
                data = event.json()
                texts[data["node"]] += data["text"]
            if all(f"line {LINES // 2 - 1}\n" in t for t in texts.values()):
                break
        events.close()  # type: ignore[attr-defined]
        assert first.last_event_id is not None and "," in first.last_event_id
        assert wait_for(sf, run_id, {"running"})["status"] == "running"
        (gates / run_id).touch()
        status = ""
        for event in client.stream_logs(run_id, start=first.last_event_id):
            if event.event == "log":
                data = event.json()
                texts[data["node"]] += data["text"]
            elif event.event == "end":
                status = event.json()["status"]
                break
    assert status == "succeeded"
    zero = [x for x in texts[0].splitlines() if x.startswith("node ")]
    one = [x for x in texts[1].splitlines() if x.startswith("[node 1] node ")]
    assert zero == node_lines(0)
    assert one == [f"[node 1] {x}" for x in node_lines(1)]
    assert texts[1].splitlines().count("[node 1] hello from node 1 of 2") == 1
