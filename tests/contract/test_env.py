"""The golden test of the job environment: any change to the mapping shows up here."""

from __future__ import annotations

from starforge.contract.env import Binding, import_env, is_per_run, job_env
from starforge.contract.jobspec import InputKind, InputRef, Inputs, JobSpec, MethodRef, Provenance
from starforge.contract.jobvars import KNOWN_KEYS
from starforge.contract.profiles import Pool


def spec() -> JobSpec:
    return JobSpec(
        project="lab",
        experiment="g1",
        method=MethodRef(id="trl/grpo", version="1.16.0", digest="sha256:abc"),
        profiles=["h200:1"],
        inputs=Inputs(
            model=InputRef(kind=InputKind.PACKAGE, value="models/tiny"),
            train_data=InputRef(kind=InputKind.SHARED, value="/data/train.jsonl"),
            validation_data=InputRef(kind=InputKind.HUB, value="org/val"),
        ),
        hyperparams={"learning_rate": 0.01},
        provenance=Provenance(git_commit="c" * 40, client_version="0.1.0"),
        observability_url="https://wandb.example/ada/lab",
    )


def binding() -> Binding:
    return Binding(
        run_id="r-0123456789",
        attempt=2,
        user="ada",
        storage_root="/s",
        run_dir="/s/runs/ada/lab/g1/r-0123456789",
        work_dir="/s/runs/ada/lab/g1/r-0123456789/work",
        out_dir="/s/runs/ada/lab/g1/r-0123456789/out",
        log_path="/s/runs/ada/lab/g1/r-0123456789/logs/attempt-2.log",
        node_rank=0,
        nnodes=1,
        gpus_per_node=1,
        visible_devices=[3],
        master_port=29511,
        pools=[
            Pool(
                name="all",
                profile="h200",
                series="h200",
                nodes=1,
                gpus_per_node=1,
                roles=["trainer"],
            )
        ],
        endpoint="http://127.0.0.1:9",
        run_token="runner-tok",
        job_token="tok",
        extra_env={"NCCL_DEBUG": "WARN", "NODE_RANK": "7"},
        sync_steps=[100, 300],
    )


def test_job_env_matches_the_golden_mapping() -> None:
    run = "/s/runs/ada/lab/g1/r-0123456789"
    work = f"{run}/work"
    assert job_env(spec(), binding()) == {
        "FORGE_RUN_ID": "r-0123456789",
        "FORGE_ATTEMPT": "2",
        "FORGE_USER": "ada",
        "FORGE_PROJECT": "lab",
        "FORGE_EXPERIMENT": "g1",
        "FORGE_METHOD": "trl/grpo",
        "FORGE_METHOD_VERSION": "1.16.0",
        "FORGE_FRAMEWORK": "trl",
        "FORGE_GIT_COMMIT": "c" * 40,
        "FORGE_GIT_DIRTY": "0",
        "FORGE_STORAGE_ROOT": "/s",
        "FORGE_RUN_DIR": run,
        "FORGE_WORK_DIR": work,
        "FORGE_EXP_DIR": f"{work}/experiments/g1",
        "FORGE_OUT_DIR": f"{run}/out",
        "FORGE_LOG_FILE": f"{run}/logs/attempt-2.log",
        "FORGE_MODEL": f"{work}/models/tiny",
        "FORGE_TRAIN_DATA": "/data/train.jsonl",
        "FORGE_VALIDATION_DATA": "org/val",
        "FORGE_HYPERPARAMS": '{"learning_rate": 0.01}',
        "FORGE_POOL": "all",
        "FORGE_CLUSTER_NUM_NODES": "1",
        "FORGE_CLUSTER_GPUS_PER_NODE": "1",
        "FORGE_OBSERVABILITY_URL": "https://wandb.example/ada/lab",
        "NNODES": "1",
        "NODE_RANK": "0",
        "GPUS_PER_NODE": "1",
        "NPROC_PER_NODE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29511",
        "CUDA_VISIBLE_DEVICES": "3",
        "STARFORGE_ENABLED": "1",
        "STARFORGE_ENDPOINT": "http://127.0.0.1:9",
        "STARFORGE_RUN_ID": "r-0123456789",
        "STARFORGE_TOKEN": "tok",
        "STARFORGE_SYNC_STEPS": "100,300",
        "HF_HUB_OFFLINE": "1",
        "HF_HOME": "/s/cache/hf",
        "PYTHONUNBUFFERED": "1",
        "NCCL_DEBUG": "WARN",
    }


def test_every_platform_key_is_declared_known() -> None:
    platform_keys = set(job_env(spec(), binding())) - set(binding().extra_env)
    assert platform_keys <= set(KNOWN_KEYS)


def test_profile_env_cannot_override_the_platform_topology() -> None:
    assert job_env(spec(), binding())["NODE_RANK"] == "0"


def test_the_import_env_is_the_jobs_environment_without_its_per_run_variables() -> None:
    env = job_env(spec(), binding())
    imports = import_env(binding())
    assert imports == {
        "HF_HUB_OFFLINE": "1",
        "HF_HOME": "/s/cache/hf",
        "PYTHONUNBUFFERED": "1",
        "NCCL_DEBUG": "WARN",  # the profile's env: it may be read at import
    }
    assert {k: v for k, v in env.items() if not is_per_run(k)} == imports
    assert is_per_run("FORGE_RUN_ID") and is_per_run("CUDA_VISIBLE_DEVICES")
    assert not is_per_run("HF_HOME")
