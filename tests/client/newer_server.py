"""What a newer server (or a newer client) writes: today's models plus fields this version lacks.

Each builder returns the model as this version builds it and its JSON as the next version would
send it, with fields added at several depths, so a test can check that a lenient read gives
back exactly today's model.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from starforge.catalog.loader import get_method
from starforge.contract.api import AttemptView, ProfilesResponse, RunView
from starforge.contract.jobspec import JobSpec, Provenance
from starforge.contract.profiles import Pool, ProfileDef
from starforge.contract.states import JobStatus

WHEN = datetime(2025, 5, 1, 12, 0, tzinfo=UTC)


def spec() -> JobSpec:
    return JobSpec(
        project="lab",
        experiment="c1",
        method=get_method("custom/custom").ref(),
        profiles=["h200:8"],
        provenance=Provenance(git_commit="a" * 40, client_version="0.1.0"),
    )


def run_view() -> tuple[RunView, dict[str, Any]]:
    view = RunView(
        run_id="r-0000000001",
        user="alice",
        project="lab",
        experiment="c1",
        method="custom/custom",
        status=JobStatus.RUNNING,
        profiles=["h200:8"],
        pools=[Pool(name="all", profile="h200", series="h200", nodes=1, gpus_per_node=8)],
        gpus=8,
        created_at=WHEN,
        attempts=[AttemptView(number=1, log_path="logs/attempt-1.log", started_at=WHEN)],
        spec=spec(),
    )
    wire = view.model_dump(mode="json")
    wire["cost_usd"] = 12.5
    wire["attempts"][0]["node_states"] = {"0": "running"}
    wire["pools"][0]["numa_affinity"] = "spread"
    wire["spec"]["method"]["adapter_version"] = "2"
    wire["spec"]["provenance"]["signed_by"] = "ci"
    return view, wire


def profiles() -> tuple[ProfilesResponse, dict[str, Any]]:
    response = ProfilesResponse(
        profiles=[ProfileDef(name="h200", series="h200", gpus_per_node=8, nodes=2)]
    )
    wire = response.model_dump(mode="json")
    wire["profiles"][0]["price_per_gpu_hour"] = 2.5
    wire["default_profile"] = "h200"
    return response, wire
