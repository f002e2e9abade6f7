"""``sf submit --dry-run`` shows the environment the real job gets, key for key.

Both sides run their real code: the CLI prepares the lab's experiment and describes it against
the server's profile registry; the control plane admits the same submission and a scheduler pass
writes the bindings; the job's env is ``contract.env.job_env`` over each written binding.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from starforge.cli import dry_run
from starforge.cli.submit_flow import SubmitOptions, prepare, resolve_profiles
from starforge.contract.api import ProfilesResponse, SubmitRequest
from starforge.contract.env import Binding, job_env
from starforge.contract.jobspec import JobSpec
from starforge.project.lab import Lab
from starforge.server.runtime import Runtime
from starforge.server.services.data import blobs
from starforge.server.services.runs import jobs
from starforge.server.services.scheduling import dispatch
from starforge.server.settings import Settings, load_settings

from .factories import INVENTORY, PROFILES, binding, run_row, schedule


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    # Not the default, so a dry run that assumed HF_HUB_OFFLINE=1 would show a different env.
    return load_settings(
        tmp_path / "home",
        inventory=INVENTORY,
        profiles=PROFILES,
        url="http://127.0.0.1:9999",
        hf_offline=False,
        isolation="none",  # fake jobs share the server's identity (services/access/isolation.py)
    )


def test_the_dry_run_env_of_every_node_is_the_real_jobs_env(
    rt: Runtime, new_lab: Callable[..., Lab]
) -> None:
    lab = new_lab(experiments_={"c1": "custom/custom"})
    prepared = prepare(
        SubmitOptions(
            experiment="c1",
            profiles=["h200:16"],  # two nodes: ranks, node log files, the profile's env
            image="registry.example/train:v1",
            observability_url="https://wandb.example/lab",
            cwd=lab.root,
        )
    )
    registry = ProfilesResponse(profiles=rt.settings.profiles, hf_offline=rt.settings.hf_offline)
    resolve_profiles(registry, prepared)
    shown = dry_run.describe(prepared, "alice")["plans"]

    for entry in prepared.manifest.files:
        # as alice's upload would (blobs are hers once she sent them)
        blobs.record(rt, "alice", rt.storage.put_bytes((lab.root / entry.path).read_bytes()))
    req = SubmitRequest(
        spec=prepared.spec, manifest=prepared.manifest, idempotency_key=uuid.uuid4().hex
    )
    run_id = jobs.submit(rt, "alice", req).run_id
    assert schedule(rt) == [run_id]
    run_dir = dispatch.run_dir_of(rt, run_row(rt, run_id))
    stored = JobSpec.model_validate(
        json.loads(rt.storage.run_json_path(run_dir).read_text())["spec"]
    )

    assert [p["node_rank"] for p in shown] == [0, 1]
    for plan in shown:
        written = Binding.model_validate(binding(rt, run_id, rank=plan["node_rank"]))
        job = job_env(stored, written)
        # What only placement decides is a placeholder in the dry run; put the real value in.
        real = {
            dry_run.RUN_ID: written.run_id,
            dry_run.STORAGE: written.storage_root,
            dry_run.ENDPOINT: written.endpoint,
            dry_run.RUN_TOKEN: written.run_token,
            dry_run.JOB_TOKEN: written.job_token,
        }
        dry = {}
        for key, value in plan["env"].items():
            for placeholder, actual in real.items():
                value = value.replace(placeholder, actual)
            dry[key] = value
        assert dry.pop("MASTER_PORT") == str(dry_run.MASTER_PORT)
        assert job.pop("MASTER_PORT") == str(written.master_port)
        assert set(dry) - set(job) <= {"PATH"}  # the custom adapter's own, in the runner too
        assert {k: dry[k] for k in job} == job
        assert job["NCCL_X"] == "1" and "HF_HUB_OFFLINE" not in job
