"""The walls between runs in the podman command line of one node (pure, no podman): a run of its
own uid gets no capability and no way to gain one, its own PID and IPC namespaces, only its own
folders (the rest read-only), and its token is not on the command line every host user reads."""

from __future__ import annotations

import shutil
from pathlib import Path

from starforge.contract.env import Binding
from starforge.runner.container import (
    HIDDEN_ENV,
    MOUNTS_ENV,
    ContainerSpec,
    Mount,
    podman_argv,
    podman_env,
    report_mount,
    spec_for,
)

TOKEN = "sfj_alices_job_token_7d1c"


def binding(root: Path, **extra_env: str) -> Binding:
    run = root / "runs" / "alice" / "lab" / "c1" / "r-1"
    return Binding(
        run_id="r-1",
        attempt=2,
        user="alice",
        storage_root=str(root),
        run_dir=str(run),
        work_dir=str(run / "work"),
        out_dir=str(run / "out"),
        log_path=str(run / "logs" / "attempt-2.log"),
        visible_devices=[3],
        image="127.0.0.1:5000/lab/tiny@sha256:" + "a" * 64,
        containers="podman",
        job_uids=[61184, 64511],
        job_gid=60001,
        extra_env=extra_env,
    )


def flags(argv: list[str], name: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == name]


def test_a_run_of_its_own_uid_has_no_capability_nor_a_way_to_gain_one() -> None:
    spec = ContainerSpec(name="sf-r-1-1-0", image="tiny:1", argv=["sh"], cwd="/w", env={},
                         user="61190:60001")  # fmt: skip
    argv = podman_argv(spec)
    assert flags(argv, "--user") == ["61190:60001"]
    assert flags(argv, "--cap-drop") == ["all"]
    assert flags(argv, "--security-opt") == ["no-new-privileges"]
    assert "--privileged" not in argv and "--cap-add" not in argv
    assert not any(a.startswith("--userns") for a in argv)  # the uid is the run's on the host


def test_every_container_has_its_own_pid_and_ipc_namespaces_whatever_the_config() -> None:
    for user in ("", "61190:60001"):
        spec = ContainerSpec(name="n", image="tiny:1", argv=["sh"], cwd="/w", env={}, user=user)
        argv = podman_argv(spec)
        assert flags(argv, "--pid") == ["private"]
        assert flags(argv, "--ipc") == ["private"]


def test_the_image_user_of_a_single_user_server_keeps_its_capabilities() -> None:
    argv = podman_argv(ContainerSpec(name="n", image="tiny:1", argv=["sh"], cwd="/w", env={}))
    assert "--user" not in argv and "--cap-drop" not in argv and "--security-opt" not in argv


def test_the_jobs_token_is_not_on_the_command_line_but_in_podmans_environment() -> None:
    env = {"STARFORGE_TOKEN": TOKEN, "FORGE_RUN_ID": "r-1"}
    spec = ContainerSpec(name="n", image="tiny:1", argv=["sh"], cwd="/w", env=env)
    argv = podman_argv(spec)
    assert not any(TOKEN in a for a in argv)
    assert flags(argv, "-e") == ["FORGE_RUN_ID=r-1", "STARFORGE_TOKEN"]
    assert podman_env(spec) == {"STARFORGE_TOKEN": TOKEN}
    assert HIDDEN_ENV == ("STARFORGE_TOKEN",)


def test_a_run_mounts_its_own_folders_and_reads_its_datasets_and_parent_read_only(
    tmp_path: Path,
) -> None:
    root = tmp_path / "st"
    views = [str(tmp_path / "st/runs/alice/lab/c1/r-1/datasets/alice/set/v1")]
    b = binding(root, **{MOUNTS_ENV: ",".join(views)})
    parent = f"{root}/runs/alice/lab/c0/r-0/out/checkpoint-10"
    own_hf = f"{b.out_dir}/.starforge/hf"
    env = {"HF_HOME": own_hf, "FORGE_MODEL": parent, "STARFORGE_TOKEN": TOKEN}
    spec = spec_for(b, argv=["bash", "train.sh"], cwd=b.work_dir, env=env, host_env={},
                    user="61190:60001")  # fmt: skip
    assert spec.mounts == [
        Mount(b.work_dir, b.work_dir),
        Mount(b.out_dir, b.out_dir),
        report_mount(),
        Mount(views[0], views[0], read_only=True),
        Mount(parent, parent, read_only=True),
    ]
    # The run's own Hugging Face cache is inside its out folder: no mount of its own, and not
    # made here as root (the job, whose out folder it is, creates it).
    assert not Path(own_hf).exists()
    writable = [m.host for m in spec.mounts if not m.read_only]
    assert writable == [b.work_dir, b.out_dir]
    assert not any(m.host == str(root) or m.host.startswith(f"{root}/blobs") for m in spec.mounts)
    assert not any(m.host.startswith(f"{root}/cache") for m in spec.mounts)


def test_a_shared_hugging_face_cache_outside_the_run_is_still_mounted(tmp_path: Path) -> None:
    b = binding(tmp_path / "st")
    shared = str(tmp_path / "st" / "cache" / "hf")
    spec = spec_for(b, argv=["sh"], cwd=b.work_dir, env={"HF_HOME": shared}, host_env={})
    assert Mount(shared, shared) in spec.mounts
    assert Path(shared).is_dir()


def test_gpus_are_injected_only_on_a_host_that_has_them(tmp_path: Path) -> None:
    b = binding(tmp_path / "st")
    spec = spec_for(b, argv=["sh"], cwd=b.work_dir, env={}, host_env={})
    # The virtual inventory's GPUs (a host without nvidia-smi) are no devices: jobs use the CPU.
    assert spec.gpus == ([3] if shutil.which("nvidia-smi") else [])
