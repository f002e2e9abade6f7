"""The batch script of one attempt, pinned as text: what StarForge asks Slurm for, exactly."""

from __future__ import annotations

import pytest

from starforge.server.executors.slurm_compile import BatchJob, Component, compile_batch

RUNNER = ["/opt/sf/bin/python", "-m", "starforge.runner"]
RUN = "/shared/sf/runs/ada/lab/g1/r-1"
PROLOGUE = """\
set -u
# Rank 0 runs on the first node of component 0: its address is the job's master address.
nodelist="${SLURM_JOB_NODELIST_HET_GROUP_0:-$SLURM_JOB_NODELIST}"
first=$(scontrol show hostnames "$nodelist" | head -n 1)
addr=$(scontrol show node "$first" | sed -n 's/.*NodeAddr=\\([^ ]*\\).*/\\1/p')
export STARFORGE_SLURM_MASTER_ADDR="${addr:-$first}"
export STARFORGE_SLURM_JOB_ID="$SLURM_JOB_ID"
pids=()
# TERM before the time limit reaches this shell only: hand it to the runners (the job's steps).
# Never to srun itself: srun treats TERM as "kill the step now", and the runners must checkpoint.
trap 'scancel --signal=TERM "$SLURM_JOB_ID"' TERM
"""
EPILOGUE = """\
pids+=("$!")
status=0
for pid in "${pids[@]}"; do
  while true; do
    wait "$pid"
    rc=$?
    kill -0 "$pid" 2>/dev/null || break  # wait returned for a trap: wait again
  done
  if [ "$rc" -ne 0 ]; then status=$rc; fi
done
exit "$status"
"""
HEADER = f"""\
#!/bin/bash
#SBATCH --job-name=sf.r-1.2
#SBATCH --output={RUN}/logs/attempt-2.log
#SBATCH --open-mode=append
#SBATCH --chdir={RUN}/state
#SBATCH --no-requeue
#SBATCH --signal=B:TERM@120
"""
PICK = '\'b=("$@"); exec /opt/sf/bin/python -m starforge.runner "${b[$SLURM_PROCID]}"\''


def binding(rank: int) -> str:
    return f"{RUN}/state/attempt-2.node-{rank}.binding.json"


def job(*components: Component, **extra: object) -> BatchJob:
    return BatchJob(
        job_name="sf.r-1.2",
        log_path=f"{RUN}/logs/attempt-2.log",
        workdir=f"{RUN}/state",
        components=list(components),
        runner=RUNNER,
        **extra,  # type: ignore[arg-type]
    )


def test_one_pool_on_two_nodes_is_one_job_with_one_runner_per_node() -> None:
    pool = Component("h200", "h200", 8, ["h200-1", "h200-2"], [binding(0), binding(1)])
    assert compile_batch(job(pool)) == (
        HEADER
        + """\
#SBATCH --partition=h200
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --nodelist=h200-1,h200-2
#SBATCH --gres=gpu:h200:8
# StarForge sf.r-1.2: one runner per node
"""
        + PROLOGUE
        + "srun --nodes=2 --ntasks-per-node=1 --kill-on-bad-exit=0 bash -c "
        + f"{PICK} starforge-runner {binding(0)} {binding(1)} &\n"
        + EPILOGUE
    )


def test_two_pools_are_a_heterogeneous_job_with_one_component_and_one_srun_each() -> None:
    train = Component("h200", "h200", 8, ["h200-1"], [binding(0)])
    rollout = Component("h100", "h100", 2, ["h100-1"], [binding(1)])
    script = compile_batch(job(train, rollout, time_limit="02:00:00", extra_args=["--qos=lab"]))
    assert script.startswith(
        HEADER
        + """\
#SBATCH --time=02:00:00
#SBATCH --qos=lab
#SBATCH --partition=h200
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --nodelist=h200-1
#SBATCH --gres=gpu:h200:8
#SBATCH hetjob
#SBATCH --partition=h100
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --nodelist=h100-1
#SBATCH --gres=gpu:h100:2
"""
    )
    sruns = [line for line in script.splitlines() if line.startswith("srun ")]
    assert sruns == [
        "srun --het-group=0 --nodes=1 --ntasks-per-node=1 --kill-on-bad-exit=0 bash -c "
        f"{PICK} starforge-runner {binding(0)} &",
        "srun --het-group=1 --nodes=1 --ntasks-per-node=1 --kill-on-bad-exit=0 bash -c "
        f"{PICK} starforge-runner {binding(1)} &",
    ]


def test_with_pyxis_a_run_with_an_image_starts_its_runners_in_the_container() -> None:
    pool = Component("h200", "h200", 8, ["h200-1"], [binding(0)])
    image = "nvcr.io/lab/train:v1"
    script = compile_batch(job(pool, image=image, pyxis=True, mounts=["/shared/sf"]))
    [srun] = [line for line in script.splitlines() if line.startswith("srun ")]
    assert srun == (
        "srun --nodes=1 --ntasks-per-node=1 --kill-on-bad-exit=0 "
        f"--container-image={image} --container-workdir={RUN}/state "
        "--container-mounts=/shared/sf:/shared/sf bash -c "
        f"{PICK} starforge-runner {binding(0)} &"
    )


def test_without_pyxis_the_image_changes_nothing_in_the_script() -> None:
    pool = Component("h200", "h200", 8, ["h200-1"], [binding(0)])
    assert compile_batch(job(pool, image="nvcr.io/lab/train:v1")) == compile_batch(job(pool))


def test_paths_with_spaces_stay_one_argument() -> None:
    one = Component("h200", "h200", 1, ["h200-1"], ["/data/my runs/b.json"])
    assert "starforge.runner '/data/my runs/b.json' &\n" in compile_batch(job(one))
    two = Component("h200", "h200", 1, ["h200-1", "h200-2"], ["/data/my runs/b.json", binding(1)])
    assert f"starforge-runner '/data/my runs/b.json' {binding(1)} &" in compile_batch(job(two))


def test_a_one_node_attempt_runs_its_runner_in_the_batch_shell_beside_a_relay_step() -> None:
    # No step launch before the runner starts; the relay step is what a stop's TERM reaches.
    pool = Component("h200", "h200", 1, ["h200-1"], [binding(0)])
    assert compile_batch(job(pool)) == (
        HEADER
        + """\
#SBATCH --partition=h200
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --nodelist=h200-1
#SBATCH --gres=gpu:h200:1
# StarForge sf.r-1.2: one runner per node
"""
        + PROLOGUE.split("# TERM before")[0]
        + f"/opt/sf/bin/python -m starforge.runner {binding(0)} &\n"
        + """\
runner=$!
pids+=("$runner")
trap 'kill -TERM "$runner"' TERM
srun --nodes=1 --ntasks=1 --quiet bash -c 'trap "kill -TERM $1; exit 0" TERM; \
while kill -0 $1; do sleep 5 & wait $!; done' starforge-relay "$runner" >/dev/null 2>&1 &
relay=$!
"""
        + EPILOGUE.removeprefix('pids+=("$!")\n').removesuffix('exit "$status"\n')
        + """\
kill "$relay" 2>/dev/null  # the runner is gone: its relay step has nothing left to hand on
exit "$status"
"""
    )


def test_a_component_needs_one_binding_per_node() -> None:
    with pytest.raises(ValueError, match="2 nodes, 1 bindings"):
        compile_batch(job(Component("h200", "h200", 8, ["h200-1", "h200-2"], [binding(0)])))


def test_a_master_address_the_server_knows_is_exported_without_asking_scontrol() -> None:
    pool = Component("h200", "h200", 8, ["h200-1", "h200-2"], [binding(0), binding(1)])
    script = compile_batch(job(pool, master_addr="10.0.0.7"))
    assert "export STARFORGE_SLURM_MASTER_ADDR=10.0.0.7\n" in script
    assert "scontrol show" not in script
    assert PROLOGUE.split("pids=()")[0].splitlines()[-1] in script  # the job id, as before
