"""``sf submit --dry-run``: the resolved config, the spec and the launch plan of every node.

The plans are compiled by the same adapters the runner uses, with bindings made by the same
:func:`contract.env.make_binding` dispatch uses: the profile's env comes with the pools and
``hf_offline`` is the server's, so the environment shown is the job's. Only what the server
decides at placement is a placeholder (run id, storage root, endpoint, token, port).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from starforge.catalog.adapters import CompileContext, compile_plan
from starforge.cli.submit_flow import Prepared
from starforge.contract.env import Binding, job_env, make_binding
from starforge.contract.images import ImageSource, resolve_image
from starforge.contract.layout import StorageLayout

RUN_ID = "r-dryrun0000"
STORAGE = "<storage>"
ENDPOINT = "<server>"
RUN_TOKEN = "<run-token>"
JOB_TOKEN = "<job-token>"
MASTER_PORT = 29500


def bindings(prepared: Prepared, user: str) -> list[Binding]:
    spec = prepared.spec
    run = StorageLayout(Path(STORAGE)).run(user, spec.project, spec.experiment, RUN_ID)
    nnodes = sum(p.nodes for p in prepared.pools)
    found: list[Binding] = []
    for pool in prepared.pools:
        for _ in range(pool.nodes):
            rank = len(found)
            found.append(
                make_binding(
                    run_id=RUN_ID,
                    attempt=1,
                    user=user,
                    storage_root=STORAGE,
                    run_dir=str(run.dir),
                    log_path=str(run.log(1, rank)),
                    pools=prepared.pools,
                    pool=pool.name,
                    node_rank=rank,
                    nnodes=nnodes,
                    visible_devices=list(range(pool.gpus_per_node)),
                    master_port=MASTER_PORT,
                    endpoint=ENDPOINT,
                    run_token=RUN_TOKEN,
                    job_token=JOB_TOKEN,
                    hf_offline=prepared.hf_offline,
                )
            )
    return found


def describe(prepared: Prepared, user: str) -> dict[str, Any]:
    plans = []
    for b in bindings(prepared, user):
        env = job_env(prepared.spec, b)
        plan = compile_plan(
            CompileContext(
                spec=prepared.spec,
                method=prepared.method,
                binding=b,
                env=env,
                config=prepared.validated.run_config,
            )
        )
        added = {k: v for k, v in plan.env.items() if env.get(k) != v}
        plans.append(
            {
                "node_rank": b.node_rank,
                "pool": b.pool,
                "argv": plan.argv,
                "cwd": plan.cwd,
                "env": {**env, **added},
                "files": plan.files,
            }
        )
    return {
        "spec": prepared.spec.model_dump(mode="json"),
        "config": prepared.validated.run_config,
        "pools": [{**p.model_dump(), "total_gpus": p.total_gpus} for p in prepared.pools],
        "plans": plans,
        "files": len(prepared.manifest.files),
        "bytes": prepared.manifest.total_bytes,
        "warnings": prepared.warnings,
        "image": dry_run_image(prepared),
    }


def dry_run_image(prepared: Prepared) -> dict[str, str]:
    """The image as the client can tell it: ``--image``, else the catalog's. The server's own
    rules (framework default, runtime registry) come before the catalog and the digest is pinned
    at admission; ``sf job status`` shows what won."""
    spec, method = prepared.spec, prepared.method
    _, runtime = method.runtime_version(spec.method.framework_version or None)
    found = resolve_image(
        spec.image,
        framework=method.framework,
        runtime_id=runtime.runtime_id,
        framework_defaults={},
        runtime_images={},
        catalog_image=runtime.image,
    )
    if found is None:
        return {"ref": "", "source": "", "note": "no image: the job runs on the host"}
    note = (
        ""
        if found.source is ImageSource.FLAG
        else (
            "the server's framework default or runtime registry, if set, replaces it at admission"
        )
    )
    return {"ref": found.ref, "source": found.source.value, "note": note}
