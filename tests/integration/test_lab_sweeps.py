"""Running a lab: checkpoint-first preemption and sweeps with early stopping, on a real server
with real runners (custom/custom jobs for preemption, tiny trl/sft runs for the sweep)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from starforge import __version__
from starforge.client import config
from starforge.contract.api import API_PREFIX, CLIENT_VERSION_HEADER
from starforge.project import experiments
from starforge.project.lab import Lab
from tests.conftest import Result, commit_all
from tests.integration.conftest import embedded_server, wait_for
from tests.integration.test_lifecycle import (
    FINAL,
    IMAGE,
    custom_steps,
    log_of,
    submit_custom,
    wait_for_log,
)
from tests.tiny_inputs import prepare_experiment

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with embedded_server(
        tmp_path_factory.mktemp("sf-home"), {"stop_grace_s": 30, "pause_grace_s": 60}
    ) as home:
        yield home


def me(sf: Callable[..., Result]) -> str:
    got = sf("whoami", "--json").json()
    assert isinstance(got, dict)
    return str(got["user"])


def set_priority(sf: Callable[..., Result], user: str, priority: int) -> None:
    got = sf("admin", "quota", "set", user, "--priority", str(priority))
    assert got.code == 0, got.err


def wait_for_event(
    sf: Callable[..., Result], run_id: str, dst: str, timeout: float = 180.0
) -> None:
    """Until ``run_id``'s events hold a change to ``dst`` (a state too short to be polled)."""
    deadline = time.monotonic() + timeout
    while not any(e["dst"] == dst for e in sf("job", "status", run_id, "--json").json()["events"]):
        assert time.monotonic() < deadline, f"{run_id} never went {dst}"
        time.sleep(0.2)


def add_short_experiment(lab: Lab, name: str) -> None:
    """A second custom experiment in ``lab`` whose train.sh runs three quick steps."""
    experiments.new_experiment(lab, name, "custom/custom")
    folder = lab.root / "experiments" / name
    script = folder / "train.sh"
    script.write_text(
        re.sub(r'STEPS="\$\{STEPS:-\d+\}"', 'STEPS="${STEPS:-3}"', script.read_text())
    )
    (folder / "config.yaml").write_text("starforge:\n  observability: platform\n")
    commit_all(lab.root, f"add {name}")


def test_a_priority_run_takes_the_gpus_of_a_resumable_run_which_resumes_continuously(
    sf: Callable[..., Result], custom_lab: Callable[..., Lab]
) -> None:
    user = me(sf)
    set_priority(sf, user, 0)
    # The low run must still be running when the urgent one comes: its first attempt's 35 steps
    # after the checkpoint (17 s) leave a loaded machine's scheduler and PostgreSQL time to
    # preempt it; the resumed attempt runs fast, so only the first 5 steps cost wall time.
    lab = custom_lab(steps=40, step_seconds=0.5, resumed_step_seconds=0.01)
    add_short_experiment(lab, "c2")
    low = submit_custom(sf, lab, profile="h200:16")  # both nodes whole
    wait_for_log(sf, low, r"\[checkpoint\] \S+/step-5")
    set_priority(sf, user, 10)
    got = sf("submit", "c2", "--profile", "h200:8", "--image", IMAGE, "--json", cwd=lab.root)
    assert got.code == 0, got.err
    urgent = str(got.json()["run_id"])  # type: ignore[index]
    # A new priority applies to the user's queued runs at once: back to 0 only once a pass has
    # decided the preemption at the urgent run's 10 (the low run pausing), or nothing preempts.
    wait_for_event(sf, low, "pausing")
    set_priority(sf, user, 0)

    done = wait_for(sf, urgent, FINAL)
    assert done["status"] == "succeeded"
    view = wait_for(sf, low, FINAL, timeout=300)
    assert view["status"] == "succeeded", log_of(view, 2)[-2000:]
    events = view["events"]
    pausing = next(e for e in events if e["dst"] == "pausing")
    assert pausing["actor"] == f"preempted by {urgent} (priority 10)"
    requeued = next(e for e in events if e["actor"] == "preemption")
    assert requeued["reason"].startswith(f"requeued after preemption by {urgent} (priority 10)")
    first, second = view["attempts"][:2]
    assert first["end_reason"] == "preempted"
    one, two = custom_steps(log_of(view, 1)), custom_steps(log_of(view, 2))
    saved = int(second["resumed_from"].rsplit("step-", 1)[1])
    assert one == list(range(1, len(one) + 1)) and len(one) <= saved  # from 1, no gap
    assert f"(step {saved})" in log_of(view, 2)  # attempt 2 resumed from that checkpoint
    assert two == list(range(saved + 1, 41))  # the step counter continued from the checkpoint
    # The urgent run started only after the low one released its GPUs: no GPU was shared.
    assert done["started_at"] >= pausing["at"]


SFT_ARGS = [
    "--profile", "h200:1", "--model", "models/tiny-llama",
    "--train-data", "data/sft-train.jsonl", "--validation-data", "data/sft-val.jsonl",
    "-s", "max_steps=40", "-s", "logging_steps=1", "-s", "save_steps=1000",
    "-s", "eval_steps=1000",
]  # fmt: skip


def sft_lab(new_lab: Callable[..., Lab]) -> Lab:
    lab = new_lab()
    experiments.new_experiment(lab, "s1", "trl/sft")
    prepare_experiment(lab.root, "s1")
    commit_all(lab.root, "add s1")
    return lab


def loss_at(sf: Callable[..., Result], run_id: str, step: int) -> float | None:
    """The loss the run logged at the latest step <= ``step`` (the value ASHA judged)."""
    body: Any = sf("job", "metrics", run_id, "-k", "loss", "--json").json()
    points = [p for s in body["series"] for p in zip(s["steps"], s["values"], strict=True)]
    before = [v for s, v in sorted(points) if s <= step]
    return before[-1] if before else None


def test_a_dry_run_sweep_lists_the_typed_variants_and_submits_nothing(
    sf: Callable[..., Result], new_lab: Callable[..., Lab]
) -> None:
    lab = sft_lab(new_lab)

    def run_ids() -> set[str]:
        listed: Any = sf("job", "ls", "--limit", "1000", "--json").json()
        return {r["run_id"] for r in listed}

    before = run_ids()
    got = sf(
        "sweep", "s1", "-g", "learning_rate=1e-4,4e-3", "-g", "seed=1,2,3", *SFT_ARGS,
        "--dry-run", "--json", cwd=lab.root,
    )  # fmt: skip
    assert got.code == 0, got.err
    plan = got.json()
    assert isinstance(plan, dict)
    assert plan["variants"][0] == {"learning_rate": 1e-4, "seed": 1}
    assert len(plan["variants"]) == 6 and plan["hyperparams"]["max_steps"] == 40
    assert run_ids() == before  # nothing submitted
    typo = sf("sweep", "s1", "-g", "seed=1,x", *SFT_ARGS, "--dry-run", cwd=lab.root)
    assert typo.code == 2 and "seed" in typo.err


def synchronous_halving(
    losses: dict[str, list[float | None]], rungs: list[int], keep: int
) -> dict[str, int]:
    """Who successive halving rules out at which rung, the whole rung known at once (runs in
    grid order: a tie goes to the earlier one)."""
    alive, out = list(losses), {}
    for r, rung in enumerate(rungs):
        reached = [x for x in alive if losses[x][r] is not None]
        ranked = sorted(reached, key=lambda x: (losses[x][r], alive.index(x)))
        kept = max(1, len(ranked) // keep)
        out.update({x: rung for x in ranked[kept:]})
        alive = [x for x in alive if x in ranked[:kept]]
    return out


def most_at_once(views: dict[str, dict[str, Any]]) -> int:
    """The most variants that held resources at the same time, from their events."""
    holding = {"starting", "running", "pausing", "stopping"}
    edges = []
    for view in views.values():
        was = False
        for event in view["events"]:
            now = event["dst"] in holding
            if now != was:
                edges.append((event["at"], 1 if now else -1))
            was = now
    level = peak = 0
    for _, step in sorted(edges, key=lambda e: (e[0], e[1])):  # a release before a start
        level += step
        peak = max(peak, level)
    return peak


@pytest.mark.training
def test_a_sweep_two_at_a_time_rules_out_what_synchronous_halving_would(
    sf: Callable[..., Result], new_lab: Callable[..., Lab]
) -> None:
    lab = sft_lab(new_lab)
    user = me(sf)
    before: Any = sf("admin", "quota", "show", user, "--json").json()
    limit = before["quota"]["max_runs"]
    assert sf("admin", "quota", "set", user, "--max-runs", "2").code == 0
    try:
        got = sf(
            "sweep", "s1", "-g", "learning_rate=0.0001,0.004", "-g", "seed=1,2,3", *SFT_ARGS,
            "--early-stop", "--stop-metric", "loss", "--rungs", "4,8", "--keep", "2", "--json",
            cwd=lab.root,
        )  # fmt: skip
        assert got.code == 0, got.err + got.out[-2000:]
        created = got.json()
        assert isinstance(created, dict)
        sweep_id, runs = created["sweep_id"], [r["run_id"] for r in created["runs"]]
        assert len(runs) == 6 and created["files_uploaded"] >= 1
        listed = sf("job", "ls", "--sweep", sweep_id, "--json").json()
        assert isinstance(listed, list) and [r["run_id"] for r in listed] == runs
        views: dict[str, Any] = {r: wait_for(sf, r, FINAL, timeout=1200) for r in runs}
    finally:
        sf("admin", "quota", "set", user, "--max-runs", "none" if limit is None else str(limit))

    losses = {r: [loss_at(sf, r, 4), loss_at(sf, r, 8)] for r in runs}
    expected = synchronous_halving(losses, [4, 8], 2)
    assert sorted(expected.values()) == [4, 4, 4, 8, 8]  # six reached rung 4: 3, then 1, kept
    statuses = {r: v["status"] for r, v in views.items()}
    assert {r for r, s in statuses.items() if s == "stopped"} == set(expected), statuses
    (best,) = set(runs) - set(expected)
    assert statuses[best] == "succeeded"
    for r, rung in expected.items():
        assert views[r]["end_reason"] == "early_stopped", views[r]
        assert str(views[r]["reason"]).startswith(
            f"early-stopped by sweep {sweep_id} at rung {rung}: loss={loss_at(sf, r, rung):.6g} "
            "not in top 1/2"
        ), views[r]["reason"]
        steps: Any = sf("job", "metrics", r, "-k", "loss", "--json").json()
        # It reached the rung it was judged at; how far past it a stopped run still got
        # depends on the machine's speed (a tiny run may log its last step before its stop
        # lands), so only its end, stopped, is asserted above.
        assert max(max(s["steps"]) for s in steps["series"]) >= rung
    assert most_at_once(views) <= 2  # the quota held throughout
    promoted = [
        e for v in views.values() for e in v["events"]
        if e["actor"] == f"sweep {sweep_id}" and e["dst"] == "queued"
    ]  # fmt: skip
    assert promoted and all(e["reason"].startswith("promoted by sweep") for e in promoted)

    status = sf("sweep", "status", sweep_id, "--json").json()
    assert isinstance(status, dict)
    assert status["variants"][0]["run_id"] == best  # the one that finished leads
    assert [v["rank"] for v in status["variants"]] == [1, 2, 3, 4, 5, 6]
    shown = {v["run_id"]: v["end_reason"] for v in status["variants"]}
    assert shown == {best: "completed", **{r: "early_stopped" for r in expected}}
    table = sf("sweep", "status", sweep_id)
    assert table.code == 0 and "learning_rate" in table.out and "LOSS" in table.out
    assert json.dumps(status)  # a JSON document for scripts

    # A client before 0.2.0 knows no early_stopped: the server tells it stopped_by_user.
    server = config.find_server()
    assert server is not None
    out = next(iter(expected))
    for client, said in (("0.1.0", "stopped_by_user"), (__version__, "early_stopped")):
        headers = {"Authorization": f"Bearer {server.token}", CLIENT_VERSION_HEADER: client}
        with httpx.Client(base_url=server.url + API_PREFIX, headers=headers) as http:
            run = http.get(f"/runs/{out}")
            assert run.json()["end_reason"] == said
            assert ("early_stopped" in run.text) is (said == "early_stopped")  # attempts too
            listed: Any = http.get(f"/sweeps/{sweep_id}").json()
            assert {v["end_reason"] for v in listed["variants"]} == {"completed", said}
