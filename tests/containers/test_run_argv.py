"""The podman command line of one node, as text: mounts, env, limits, GPUs as CDI devices."""

from __future__ import annotations

from starforge.runner.container import (
    REPORT_MOUNT,
    ContainerSpec,
    Mount,
    container_env,
    podman_argv,
    with_report_path,
)


def test_podman_argv_of_a_two_gpu_node_is_exactly_this() -> None:
    spec = ContainerSpec(
        name="sf-r-0000000007-2-0",
        image="127.0.0.1:5000/lab/tiny@sha256:" + "a" * 64,
        argv=["bash", "/w/r7/experiments/c1/train.sh"],
        cwd="/w/r7/experiments/c1",
        env={"FORGE_RUN_ID": "r-0000000007", "CUDA_VISIBLE_DEVICES": "4,6", "B": "2"},
        mounts=[
            Mount("/w/r7", "/w/r7"),
            Mount("/pkg", "/opt/p", True),
        ],
        gpus=[4, 6],
        nofile=20000,
        nproc=32768,
        user="65534:65534",
        memory="512m",
    )
    assert podman_argv(spec) == [
        "podman", "run", "--name", "sf-r-0000000007-2-0", "--runtime", "runc", "--init",
        "--network", "host", "--pid", "private", "--ipc", "private",
        "--ulimit", "nofile=20000:20000", "--ulimit", "nproc=32768:32768",
        "--memory", "512m", "--memory-swap", "512m",
        "--user", "65534:65534", "--cap-drop", "all", "--security-opt", "no-new-privileges",
        "--device", "nvidia.com/gpu=4", "--device", "nvidia.com/gpu=6",
        "-v", "/w/r7:/w/r7", "-v", "/pkg:/opt/p:ro",
        "-e", "B=2", "-e", "CUDA_VISIBLE_DEVICES=0,1", "-e", "FORGE_RUN_ID=r-0000000007",
        "--workdir", "/w/r7/experiments/c1",
        "127.0.0.1:5000/lab/tiny@sha256:" + "a" * 64,
        "bash", "/w/r7/experiments/c1/train.sh",
    ]  # fmt: skip


def test_a_node_without_gpus_gets_no_devices_and_no_cuda_visible_devices() -> None:
    spec = ContainerSpec(
        name="sf-r-1-1-0", image="tiny:1", argv=["sh"], cwd="/w",
        env={"CUDA_VISIBLE_DEVICES": "0"},
    )  # fmt: skip
    argv = podman_argv(spec)
    assert "--device" not in argv
    assert not any(a.startswith("CUDA_VISIBLE_DEVICES") for a in argv)


def test_the_container_gets_what_the_platform_set_not_the_hosts_environment() -> None:
    host = {"PATH": "/host/venv/bin:/usr/bin", "HOME": "/root", "PYTHONUNBUFFERED": "0"}
    plan = {**host, "FORGE_RUN_ID": "r-1", "PYTHONUNBUFFERED": "1", "STARFORGE_TOKEN": "job"}
    env = with_report_path(container_env(plan, host))
    assert env == {
        "FORGE_RUN_ID": "r-1",
        "PYTHONUNBUFFERED": "1",
        "STARFORGE_TOKEN": "job",
        "PYTHONPATH": REPORT_MOUNT,
    }
