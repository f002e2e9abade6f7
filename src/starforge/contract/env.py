"""The one mapping from (JobSpec, Binding) to the environment of a job.

The server decides everything about where and how a node of a run executes (paths, topology, GPUs,
the ingest endpoint, the user the job runs as, and two tokens) and writes it as a :class:`Binding`;
the runner turns spec + binding into environment variables with :func:`job_env` and nothing else. A
golden test pins this mapping key by key. The platform owns topology: whatever the uploaded config
says about nodes or GPUs is overridden by these variables.

Two tokens, two powers: ``run_token`` is the runner's (lifecycle events: ``running``, ``exited``),
``job_token`` the job's (metrics ingest into its own run, nothing else). Only the job token is
put in the job's environment (``STARFORGE_TOKEN``), so a job cannot report its own run finished.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import Field

from starforge.contract.base import Contract
from starforge.contract.jobspec import InputKind, InputRef, JobSpec
from starforge.contract.jobvars import PER_NODE_KEYS
from starforge.contract.layout import RunLayout
from starforge.contract.profiles import Pool


class PlannedLaunch(Contract):
    """The launch plan the server compiled at dispatch (its catalog is loaded already), so that
    a cold runner starts the job before it imports the catalog or the HTTP client.

    ``env`` is the job's environment without the runner's own (the runner lays it over its
    environment, as its own compile would). The plan assumed two facts of the runner's machine:
    its interpreter (``python``: a trl job's program, a custom job's ``PATH``) and its ``PATH``;
    a runner whose facts differ compiles the plan itself."""

    argv: list[str]
    cwd: str
    env: dict[str, str] = Field(default_factory=dict)
    files: dict[str, str] = Field(default_factory=dict)  # path -> content, written before launch
    packages: list[str] = Field(default_factory=list)  # the runtime's pins the job's Python needs
    python: str = ""
    path: str = ""
    # The package the server unpacked into the work dir (its manifest's digest, as the work
    # dir's marker names it); "": the runner unpacks it, and compiles its own plan.
    unpacked: str = ""


class Binding(Contract):
    """Server-resolved facts about one node of one attempt of a run.

    Built strictly by the server; the runner (possibly an older image) reads it with
    ``Binding.read``, which ignores fields it does not know."""

    run_id: str
    attempt: int = Field(ge=1)
    user: str
    storage_root: str
    run_dir: str
    work_dir: str
    out_dir: str
    log_path: str
    node_rank: int = 0
    nnodes: int = 1
    gpus_per_node: int = 1
    # The training processes this node starts (the launcher's --nproc_per_node): one per GPU, or
    # the server's cpu_processes_per_node when jobs run on the CPU. 0 (an older server): one per
    # GPU.
    processes_per_node: int = Field(default=0, ge=0)
    visible_devices: list[int] = Field(default_factory=list)
    master_addr: str = "127.0.0.1"
    master_port: int = 29500
    pools: list[Pool] = Field(default_factory=list)
    pool: str = "all"
    endpoint: str = ""
    run_token: str = ""  # the runner's: lifecycle only; never given to the job
    job_token: str = ""  # the job's: ingest into this run only (STARFORGE_TOKEN)
    # The PEM of the CA the server's certificate is checked by (its ``tls_ca_file``; "": the
    # default bundle): the runner trusts it, and writes it for the job (STARFORGE_CA_FILE).
    tls_ca: str = ""
    job_user: str = ""  # run the job as this user (the runner must be root); "" = the runner's
    # A root server's per-run identities: the runner takes a uid of this [first, last] range that
    # no live run holds, for every node of the attempt, with ``job_gid`` (its member's group).
    job_uids: list[int] = Field(default_factory=list)
    job_gid: int = 0
    # The server unpacked the package and linked the run's datasets into the run before it was
    # submitted (``python -m starforge.runner stage``): a job of its member's Unix account reads
    # neither the blob store nor the dataset cache, which are root's alone.
    staged: bool = False
    resume_from: str = ""
    hf_offline: bool = True
    extra_env: dict[str, str] = Field(default_factory=dict)
    image: str = ""  # the image the run records; "" = none
    containers: str = ""  # the server's runtime in effect: "podman" runs the job in the image
    # The method's framework (trl, verl, custom, ...): the local executor starts the runner of
    # a trl job from its warm trainer, which has the training stack imported.
    framework: str = ""
    # The steps at which the job's reports go out before its training goes on (the rungs of the
    # early-stopping sweep the run is a variant of): STARFORGE_SYNC_STEPS.
    sync_steps: list[int] = Field(default_factory=list)
    # The plan the server compiled, for a node with nothing to decide before its job starts
    # (runner/quick.py); None: the runner compiles it (an older server, or a run that needs the
    # node first: datasets, secrets, an image, another user, several processes).
    launch: PlannedLaunch | None = None

    @property
    def procs_per_node(self) -> int:
        return self.processes_per_node or max(self.gpus_per_node, 1)

    @property
    def world_size(self) -> int:
        """The training processes of the run, every node's together (one pool of equal nodes)."""
        return self.nnodes * self.procs_per_node


def is_per_run(name: str) -> bool:
    """Whether the platform sets ``name`` anew for each run or node (see :func:`import_env`)."""
    return name.startswith(("FORGE_", "STARFORGE_")) or name in PER_NODE_KEYS


# The warm trainer (runner/warm.py, started by the local executor): its flag, and the variable
# that replaces the list of what it imports (a test's lighter stack).
WARM_TRAINER_FLAG = "--trainer"
WARM_TRAINER_PRELOAD_ENV = "STARFORGE_WARM_TRAINER_PRELOAD"


def _server_fixed(b: Binding) -> dict[str, str]:
    """The variables of :func:`job_env` that are the same for every run of one server."""
    return {
        "HF_HUB_OFFLINE": "1" if b.hf_offline else "",
        "HF_HOME": f"{b.storage_root}/cache/hf",
        "PYTHONUNBUFFERED": "1",
    }


def import_env(b: Binding) -> dict[str, str]:
    """What :func:`job_env` sets besides the per-run variables (:func:`is_per_run`): the part of
    a job's environment that libraries may read when they are imported, the same for every run
    of one server and profile. The warm trainer imports the training stack under it."""
    env = _server_fixed(b)
    for key, value in b.extra_env.items():
        env.setdefault(key, value)
    return {k: v for k, v in env.items() if v != "" and not is_per_run(k)}


def make_binding(
    *,
    run_id: str,
    attempt: int,
    user: str,
    storage_root: str,
    run_dir: str,
    log_path: str,
    pools: list[Pool],
    pool: str,
    node_rank: int,
    nnodes: int,
    visible_devices: list[int],
    master_port: int,
    endpoint: str,
    run_token: str,
    hf_offline: bool,
    resume_from: str = "",
    master_addr: str = "127.0.0.1",
    job_token: str = "",
    tls_ca: str = "",
    job_user: str = "",
    job_uids: list[int] | None = None,
    job_gid: int = 0,
    staged: bool = False,
    image: str = "",
    containers: str = "",
    framework: str = "",
    sync_steps: list[int] | None = None,
) -> Binding:
    """The binding of one node: the one maker, used by dispatch and by ``sf submit --dry-run``.

    The node's shape and the profile's env come from its pool as admission recorded it, never
    from the server's current settings.
    """
    by_name = {p.name: p for p in pools}
    own = by_name[pool]
    layout = RunLayout(Path(run_dir))
    return Binding(
        run_id=run_id,
        attempt=attempt,
        user=user,
        storage_root=storage_root,
        run_dir=run_dir,
        work_dir=str(layout.work),
        out_dir=str(layout.out),
        log_path=log_path,
        node_rank=node_rank,
        nnodes=nnodes,
        gpus_per_node=own.gpus_per_node,
        processes_per_node=own.procs_per_node,
        visible_devices=list(visible_devices),
        master_addr=master_addr,
        master_port=master_port,
        pools=pools,
        pool=pool,
        endpoint=endpoint,
        run_token=run_token,
        job_token=job_token,
        tls_ca=tls_ca,
        job_user=job_user,
        job_uids=list(job_uids or []),
        job_gid=job_gid,
        staged=staged,
        resume_from=resume_from,
        hf_offline=hf_offline,
        extra_env=dict(own.env),
        image=image,
        containers=containers,
        framework=framework,
        sync_steps=list(sync_steps or []),
    )


def input_location(ref: InputRef | None, work_dir: str) -> str:
    """Where an input is inside the job: hub ids as-is, package paths under the work dir."""
    if ref is None:
        return ""
    if ref.kind is InputKind.PACKAGE:
        return f"{work_dir}/{ref.value}"
    return ref.value


def model_location(spec: JobSpec, work_dir: str) -> str:
    """The model the job starts from: the ``--init-from`` artifact admission resolved, else
    ``--model``."""
    if spec.init_from is not None and spec.init_from.path:
        return spec.init_from.path
    return input_location(spec.inputs.model, work_dir)


def job_env(spec: JobSpec, b: Binding) -> dict[str, str]:
    """The job's environment, in a fixed order; empty values are left out."""
    framework = spec.method.id.split("/", 1)[0]
    env: dict[str, str] = {
        "FORGE_RUN_ID": b.run_id,
        "FORGE_ATTEMPT": str(b.attempt),
        "FORGE_USER": b.user,
        "FORGE_PROJECT": spec.project,
        "FORGE_EXPERIMENT": spec.experiment,
        "FORGE_METHOD": spec.method.id,
        "FORGE_METHOD_VERSION": spec.method.version,
        "FORGE_FRAMEWORK": framework,
        "FORGE_GIT_COMMIT": spec.provenance.git_commit,
        "FORGE_GIT_DIRTY": "1" if spec.provenance.git_dirty else "0",
        "FORGE_STORAGE_ROOT": b.storage_root,
        "FORGE_RUN_DIR": b.run_dir,
        "FORGE_WORK_DIR": b.work_dir,
        "FORGE_EXP_DIR": f"{b.work_dir}/{spec.exp_dir}",
        "FORGE_OUT_DIR": b.out_dir,
        "FORGE_LOG_FILE": b.log_path,
        "FORGE_MODEL": model_location(spec, b.work_dir),
        "FORGE_TRAIN_DATA": input_location(spec.inputs.train_data, b.work_dir),
        "FORGE_VALIDATION_DATA": input_location(spec.inputs.validation_data, b.work_dir),
        "FORGE_HYPERPARAMS": json.dumps(spec.hyperparams, sort_keys=True)
        if spec.hyperparams
        else "",
        "FORGE_RESUME_FROM": b.resume_from,
        "FORGE_POOL": b.pool,
        "FORGE_POOL_TOPOLOGY": json.dumps(
            [p.model_dump(exclude={"env"}) for p in b.pools], sort_keys=True
        )
        if len(b.pools) > 1
        else "",
        "FORGE_CLUSTER_NUM_NODES": str(b.nnodes),
        "FORGE_CLUSTER_GPUS_PER_NODE": str(b.gpus_per_node),
        "FORGE_OBSERVABILITY_URL": spec.observability_url,
        "NNODES": str(b.nnodes),
        "NODE_RANK": str(b.node_rank),
        "GPUS_PER_NODE": str(b.gpus_per_node),
        "NPROC_PER_NODE": str(b.procs_per_node),
        "MASTER_ADDR": b.master_addr,
        "MASTER_PORT": str(b.master_port),
        "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in b.visible_devices),
        "STARFORGE_ENABLED": "1" if b.job_token else "0",
        "STARFORGE_ENDPOINT": b.endpoint,
        "STARFORGE_RUN_ID": b.run_id,
        "STARFORGE_TOKEN": b.job_token,  # never b.run_token: the job may not post lifecycle
        "STARFORGE_CA_FILE": str(RunLayout(Path(b.run_dir)).ca_file) if b.tls_ca else "",
        "STARFORGE_SYNC_STEPS": ",".join(map(str, b.sync_steps)),
        **_server_fixed(b),
    }
    # Profile env may add keys but never override what the platform decided.
    for key, value in b.extra_env.items():
        env.setdefault(key, value)
    return {k: v for k, v in env.items() if v != ""}
