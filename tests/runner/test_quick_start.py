"""A cold runner whose binding carries the server's launch plan (and whose package the server
unpacked) starts its job before it imports pydantic, the catalog or the HTTP client, runs the same
job its own compile would, and compiles its own plan wherever the server's does not hold."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from starforge.catalog.adapters import planned
from starforge.catalog.loader import get_method
from starforge.contract.env import Binding
from starforge.contract.jobspec import JobSpec, Manifest
from starforge.contract.layout import RunLayout
from starforge.contract.secrets import SecretRequest
from starforge.runner import container, quick, unpack
from starforge.runner.main import Runner
from tests.runner.test_runner import layout_of, make_run

CONFIG = {"starforge": {"observability": "platform"}}  # custom: the runner's Python on PATH

# Runs the runner as `python -m starforge.runner BINDING` does, noting whether the job was running
# when the runner first imported pydantic, the catalog or httpx; the job waits for that moment.
WATCHED = ("pydantic", "starforge.catalog", "httpx")
PROBE = """
import json, os, runpy, sys
go, seen = sys.argv[2], {}
class Watch:
    def find_spec(self, name, path=None, target=None):
        if name in ("pydantic", "httpx", "starforge.catalog") and name not in seen:
            with open(f"/proc/self/task/{os.getpid()}/children") as kids:
                seen[name] = bool(kids.read().split())
            open(go, "w").close()
        return None
sys.meta_path.insert(0, Watch())
sys.argv = ["starforge.runner", sys.argv[1]]
try:
    runpy.run_module("starforge.runner", run_name="__main__", alter_sys=True)
except SystemExit as exit:
    print(json.dumps({"exit": exit.code, "job_running_at_import": seen}))
"""
WAITS = """while [[ ! -e "$FORGE_RUN_DIR/go" ]]; do sleep 0.05; done
echo "job ran on $FORGE_RUN_ID"
"""


def with_plan(binding_path: Path, **plan_update: Any) -> tuple[JobSpec, Binding]:
    """Give the run its config and its binding the plan the server compiles at dispatch."""
    layout = layout_of(binding_path)
    data = json.loads(layout.run_json.read_text())
    layout.run_json.write_text(json.dumps({**data, "config": CONFIG}))
    spec = JobSpec.read(data["spec"])
    binding = Binding.read(binding_path.read_bytes())
    plan = planned.precompile(spec, get_method(spec.method.id), binding, CONFIG)
    assert plan is not None
    manifest = Manifest.read(data["manifest"])  # the server unpacks the package, as dispatch does
    unpack.unpack(manifest, Path(binding.storage_root), Path(binding.work_dir))
    update = {"unpacked": unpack.manifest_digest(manifest), **plan_update}
    binding = binding.model_copy(update={"launch": plan.model_copy(update=update)})
    binding_path.write_text(binding.model_dump_json())
    return spec, binding


def run_probe(binding_path: Path) -> dict[str, Any]:
    go = RunLayout(binding_path.parent.parent).dir / "go"
    argv = [sys.executable, "-c", PROBE, str(binding_path), str(go)]
    done = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=120)
    return json.loads(done.stdout.splitlines()[-1])


def test_the_job_starts_from_the_servers_plan_before_pydantic_the_catalog_or_httpx_is_imported(
    tmp_path: Path,
) -> None:
    bp = make_run(tmp_path, WAITS)
    with_plan(bp)
    got = run_probe(bp)
    log = layout_of(bp).log(1).read_text()
    assert got["exit"] == 0, log
    assert got["job_running_at_import"] == dict.fromkeys(WATCHED, True)
    assert "job ran on r-0000000001" in log
    assert "; planned)" in log
    assert "attempt 1 node 0 exited with code 0" in log
    assert json.loads(layout_of(bp).exit_record(1, 0).read_text())["exit_code"] == 0


def test_a_plan_made_for_another_interpreter_is_compiled_again_by_the_runner(
    tmp_path: Path,
) -> None:
    bp = make_run(tmp_path, WAITS)
    with_plan(bp, python="/elsewhere/bin/python", argv=["bash", "-c", "echo from the plan"])
    got = run_probe(bp)
    log = layout_of(bp).log(1).read_text()
    assert got["exit"] == 0, log
    assert got["job_running_at_import"] == dict.fromkeys(WATCHED, False)
    assert "job ran on r-0000000001" in log
    assert "from the plan" not in log
    assert "; planned)" not in log


def test_the_servers_plan_is_the_one_the_runner_compiles_itself(tmp_path: Path) -> None:
    bp = make_run(tmp_path, WAITS)
    spec, binding = with_plan(bp)
    assert binding.launch is not None
    with open(tmp_path / "runner.log", "ab") as log:
        runner = Runner(binding, log)
        runner._load()
        own = runner._compile(spec)
    node = quick.read(bp.read_bytes())
    assert node is not None
    env = quick.job_env(node, os.environ)
    env.pop(container.VIRTUAL_GPUS_ENV, None)  # the runner's device check adds it after compile
    assert (binding.launch.argv, binding.launch.cwd, binding.launch.files) == (
        own.argv,
        own.cwd,
        own.files,
    )
    assert env == own.env


@pytest.mark.parametrize(
    "update",
    [
        {"job_user": "nobody"},
        {"image": "registry.example/x:1", "containers": "podman"},
        {"nnodes": 2},
        {"tls_ca": "-----BEGIN CERTIFICATE-----"},
    ],
    ids=["another-user", "an-image", "several-nodes", "a-private-ca"],
)
def test_a_node_that_must_decide_before_its_start_gets_no_plan(
    tmp_path: Path, update: dict[str, Any]
) -> None:
    bp = make_run(tmp_path, WAITS)
    spec, binding = with_plan(bp)
    method = get_method(spec.method.id)
    assert planned.precompile(spec, method, binding.model_copy(update=update), CONFIG) is None


def test_a_run_with_secrets_gets_no_plan(tmp_path: Path) -> None:
    bp = make_run(tmp_path, WAITS)
    spec, binding = with_plan(bp)
    spec = spec.model_copy(update={"secrets": [SecretRequest(name="HF_TOKEN")]})
    assert planned.precompile(spec, get_method(spec.method.id), binding, CONFIG) is None
