"""Neighbouring versions read each other: models are built strictly and read leniently.

A newer server may add fields anywhere in what it writes (responses, bindings, ``run.json``, log
stream events); today's client and runner must read them and ignore what they do not know. What
a person or a client *builds* (a ``method.yaml``, a request) keeps refusing unknown fields.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from starforge.catalog.loader import CATALOG_ROOT, load_file
from starforge.contract import api
from starforge.contract.api import ProfilesResponse, RunView, SubmitRequest
from starforge.contract.errors import StarForgeError
from starforge.contract.jobspec import Manifest
from tests.client.newer_server import profiles, run_view, spec
from tests.runner.test_runner import layout_of, make_run


def test_a_run_view_with_fields_a_newer_server_added_at_every_depth_reads_as_today() -> None:
    view, wire = run_view()
    assert RunView.read(wire) == view
    assert RunView.read(json.dumps(wire)) == view
    assert RunView.read(json.dumps(wire).encode()) == view


def test_a_profile_with_a_new_field_does_not_break_the_profile_list() -> None:
    response, wire = profiles()
    assert ProfilesResponse.read(wire) == response


def test_the_ignored_fields_are_named_in_the_debug_log(caplog: pytest.LogCaptureFixture) -> None:
    _, wire = run_view()
    with caplog.at_level(logging.DEBUG, logger="starforge.contract"):
        RunView.read(wire)
    logged = [r.getMessage() for r in caplog.records if r.name == "starforge.contract"]
    assert "RunView: ignored unknown fields cost_usd" in logged
    assert "AttemptView: ignored unknown fields node_states" in logged
    assert "Pool: ignored unknown fields numa_affinity" in logged
    assert "MethodRef: ignored unknown fields adapter_version" in logged
    assert "Provenance: ignored unknown fields signed_by" in logged


def test_a_read_still_refuses_a_missing_field_or_a_wrong_value() -> None:
    _, wire = run_view()
    missing = {k: v for k, v in wire.items() if k != "run_id"}
    with pytest.raises(ValidationError, match="run_id"):
        RunView.read(missing)
    with pytest.raises(ValidationError, match="status"):
        RunView.read({**wire, "status": "exploded"})


def test_building_a_model_with_a_field_this_version_lacks_is_refused() -> None:
    _, wire = run_view()
    with pytest.raises(ValidationError) as exc:
        RunView.model_validate(wire)
    where = {err["loc"] for err in exc.value.errors() if err["type"] == "extra_forbidden"}
    assert ("cost_usd",) in where and ("attempts", 0, "node_states") in where


def test_a_request_with_an_unknown_field_is_refused_at_any_depth() -> None:
    body: dict[str, Any] = {
        "spec": spec().model_dump(mode="json"),
        "manifest": Manifest().model_dump(mode="json"),
        "idempotency_key": "key-00000001",
    }
    assert SubmitRequest.model_validate(body).spec == spec()
    body["spec"]["provenance"]["signed_by"] = "ci"
    with pytest.raises(ValidationError) as exc:
        SubmitRequest.model_validate(body)
    assert exc.value.errors()[0]["loc"] == ("spec", "provenance", "signed_by")


def test_a_method_yaml_with_an_unknown_key_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "method.yaml"
    shutil.copy(CATALOG_ROOT / "custom" / "custom" / "method.yaml", path)
    assert load_file(path).id == "custom/custom"
    path.write_text(path.read_text() + "entrypiont: {kind: python}\n")
    with pytest.raises(StarForgeError, match="entrypiont"):
        load_file(path)


def newer_server_files(binding_path: Path) -> None:
    """Rewrite a run's binding and run.json as a newer server would write them."""
    binding = json.loads(binding_path.read_text())
    binding["numa_node"] = 1
    binding["pools"] = [
        {"name": "all", "profile": "h200", "series": "h200", "nodes": 1, "gpus_per_node": 1}
        | {"numa_affinity": "spread"}
    ]
    binding_path.write_text(json.dumps(binding))
    for path in layout_of(binding_path).dir.rglob("run.json"):
        run = json.loads(path.read_text())
        run["resolved_config"] = {"lr": 0.1}
        run["spec"]["method"]["adapter_version"] = "2"
        run["manifest"]["files"][0]["mode"] = "0644"
        path.write_text(json.dumps(run))


def test_a_binding_and_run_json_from_a_newer_server_run_in_todays_runner(tmp_path: Path) -> None:
    bp = make_run(tmp_path, 'echo "hello from $FORGE_EXPERIMENT"\n')
    newer_server_files(bp)
    code = subprocess.run([sys.executable, "-m", "starforge.runner", str(bp)]).returncode
    log = layout_of(bp).log(1).read_text()
    assert code == 0, log
    assert "hello from c1" in log


def test_log_stream_events_from_a_newer_server_are_read_typed() -> None:
    built = api.StreamEnd(status="failed", end_reason="oom", exit_code=137)
    sent = json.loads(built.model_dump_json()) | {"cost_usd": 3.0}
    assert api.read_stream_event(api.SSE_END, json.dumps(sent)) == built
    status = api.read_stream_event(
        api.SSE_STATUS, '{"status": "queued", "reason": "quota", "attempts": 0, "eta_s": 30}'
    )
    assert status == api.StreamStatus(status="queued", reason="quota", attempts=0)


def test_a_log_stream_event_of_a_kind_this_version_lacks_is_skipped() -> None:
    assert api.read_stream_event("progress", '{"step": 10}') is None
