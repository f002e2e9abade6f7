"""The names of the variables the platform sets for every job (:func:`contract.env.job_env`).

Their own module, free of imports, because both the environment mapping and the secrets rules
(a secret may not take one of these names, :mod:`contract.secrets`) need them, and the secrets
rules sit below the JobSpec that the mapping reads.
"""

from __future__ import annotations

# What differs between two runs, or two nodes, of one server: read when the job works, never
# when a library is imported (CUDA_VISIBLE_DEVICES at CUDA's first use, the rendezvous at
# init_process_group, the rest by our own code).
_PER_NODE = (
    "NNODES",
    "NODE_RANK",
    "GPUS_PER_NODE",
    "NPROC_PER_NODE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "CUDA_VISIBLE_DEVICES",
)

KNOWN_KEYS: tuple[str, ...] = (
    "FORGE_RUN_ID",
    "FORGE_ATTEMPT",
    "FORGE_USER",
    "FORGE_PROJECT",
    "FORGE_EXPERIMENT",
    "FORGE_METHOD",
    "FORGE_METHOD_VERSION",
    "FORGE_FRAMEWORK",
    "FORGE_GIT_COMMIT",
    "FORGE_GIT_DIRTY",
    "FORGE_STORAGE_ROOT",
    "FORGE_RUN_DIR",
    "FORGE_WORK_DIR",
    "FORGE_EXP_DIR",
    "FORGE_OUT_DIR",
    "FORGE_LOG_FILE",
    "FORGE_MODEL",
    "FORGE_TRAIN_DATA",
    "FORGE_VALIDATION_DATA",
    "FORGE_HYPERPARAMS",
    "FORGE_RESUME_FROM",
    "FORGE_POOL",
    "FORGE_POOL_TOPOLOGY",
    "FORGE_CLUSTER_NUM_NODES",
    "FORGE_CLUSTER_GPUS_PER_NODE",
    "FORGE_OBSERVABILITY_URL",
    *_PER_NODE,
    "STARFORGE_ENABLED",
    "STARFORGE_ENDPOINT",
    "STARFORGE_RUN_ID",
    "STARFORGE_TOKEN",
    "STARFORGE_CA_FILE",
    "STARFORGE_SYNC_STEPS",
    "HF_HUB_OFFLINE",
    "HF_HOME",
    "PYTHONUNBUFFERED",
)
PER_NODE_KEYS = frozenset(_PER_NODE)
