"""A cold runner (``python -m starforge.runner``, as ``srun`` starts one per node) imports only what
a plain job on the host needs before it starts, and builds no model it has not used yet.

Checked in a fresh interpreter that runs the runner's ``__main__`` as ``python -m`` does, with no
binding (it prints its usage and exits), then lists what that process imported.
"""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, runpy, sys
sys.argv = ["starforge.runner"]
try:
    runpy.run_module("starforge.runner", run_name="__main__", alter_sys=True)
except SystemExit as exit:
    code = exit.code
from starforge.contract import api, env
print(json.dumps({
    "exit": code,
    "modules": sorted(sys.modules),
    "unused_model_built": api.SubmitRequest.__pydantic_complete__,
    "binding_built": env.Binding.__pydantic_complete__,
}))
"""

# Imported where they are used: datasets (a run with datasets), staging (the server's `stage`),
# the image's pull and its registry client (a run in an image), the runtime's package check (a
# pinned framework version), the report spool's drain (after the job).
LAZY = {
    "starforge.runner.datasets",
    "starforge.runner.stage",
    "starforge.runner.pull",
    "starforge.runner.preflight",
    "starforge.runner.spooldrain",
    "starforge.client.registries",
    "starforge.contract.registries",
}
# DESIGN.md: never inside the job.
FORBIDDEN = {"starforge.server", "starforge.cli", "starforge.project", "fastapi", "sqlalchemy"}
FORBIDDEN |= {"typer", "rich", "click"}


def cold_runner() -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def test_a_cold_runner_imports_nothing_a_plain_host_job_does_not_need() -> None:
    got = cold_runner()
    assert got["exit"] == 2  # the usage: it ran the runner's entry point
    modules = set(got["modules"])  # type: ignore[arg-type]
    assert "starforge.runner.main" in modules
    assert sorted(LAZY & modules) == []
    top = {m.split(".")[0] for m in modules} | {".".join(m.split(".")[:2]) for m in modules}
    assert sorted(FORBIDDEN & top) == []


def test_a_cold_runner_builds_its_models_on_first_use() -> None:
    got = cold_runner()
    assert got["unused_model_built"] is False
    assert got["binding_built"] is False  # not read yet: no binding was given
