"""``sf submit --dry-run``: the resolved config, the spec and the launch plan of every node.

The plans are compiled by the same adapters the runner uses, with a binding shaped like the one
the scheduler would write (placeholders where only the server knows: run id, storage root).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from starforge.catalog.adapters import CompileContext, compile_plan
from starforge.cli.submit_flow import Prepared
from starforge.contract.env import Binding, job_env
from starforge.contract.layout import StorageLayout

RUN_ID = "r-dryrun0000"
STORAGE = "<storage>"


def bindings(prepared: Prepared, user: str) -> list[Binding]:
    spec = prepared.spec
    run = StorageLayout(Path(STORAGE)).run(user, spec.project, spec.experiment, RUN_ID)
    nnodes = sum(p.nodes for p in prepared.pools)
    found, rank = [], 0
    for pool in prepared.pools:
        for _ in range(pool.nodes):
            found.append(
                Binding(
                    run_id=RUN_ID,
                    attempt=1,
                    user=user,
                    storage_root=STORAGE,
                    run_dir=str(run.dir),
                    work_dir=str(run.work),
                    out_dir=str(run.out),
                    log_path=str(run.log(1, rank)),
                    node_rank=rank,
                    nnodes=nnodes,
                    gpus_per_node=pool.gpus_per_node,
                    visible_devices=list(range(pool.gpus_per_node)),
                    pools=prepared.pools,
                    pool=pool.name,
                    endpoint="<server>",
                    run_token="<run-token>",
                )
            )
            rank += 1
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
    }
