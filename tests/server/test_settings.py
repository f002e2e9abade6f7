"""Settings: defaults derived from home, the YAML file, environment variables, the inventory."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from starforge.server import settings as settings_mod
from starforge.server.settings import Settings, load_settings, series_of, virtual_inventory


def test_paths_derive_from_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settings_mod.shutil, "which", lambda _: None)
    s = load_settings(tmp_path)
    assert s.storage == tmp_path / "storage"
    assert s.db_url == f"sqlite:///{tmp_path / 'server' / 'starforge.db'}"
    assert (s.host, s.port, s.executor, s.embedded, s.hf_offline) == (
        "127.0.0.1",
        0,
        "local",
        True,
        True,
    )
    assert [p.name for p in s.profiles] == ["h200", "h100"]
    assert s.stop_grace_s == 10


def test_home_comes_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STARFORGE_HOME", str(tmp_path))
    assert load_settings().home == tmp_path


def test_the_yaml_file_is_read_and_the_environment_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "server.yaml").write_text(
        "port: 8765\nstop_grace_s: 3\ninventory:\n  - {name: box, series: l40s, gpus: 4}\n"
    )
    monkeypatch.setenv("STARFORGE_PORT", "9000")
    s = load_settings(tmp_path)
    assert (s.port, s.stop_grace_s) == (9000, 3)
    assert [(n.name, n.series, n.gpus) for n in s.nodes] == [("box", "l40s", 4)]


def test_a_typo_in_the_yaml_file_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "server.yaml").write_text("prot: 1\n")
    with pytest.raises(ValidationError):
        load_settings(tmp_path)


def test_without_nvidia_smi_the_inventory_is_virtual(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(settings_mod.shutil, "which", lambda _: None)
    nodes = load_settings(tmp_path).nodes
    assert nodes == virtual_inventory()
    assert [(n.name, n.series, n.gpus) for n in nodes] == [
        ("h200-1", "h200", 8),
        ("h200-2", "h200", 8),
        ("h100-1", "h100", 8),
    ]


def test_gpus_listed_by_nvidia_smi_make_one_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # nvidia-smi is outside the project: this machine has none, so its answer is stood in for.
    monkeypatch.setattr(settings_mod.shutil, "which", lambda _: "/usr/bin/nvidia-smi")

    def fake_run(*_: object, **__: object) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess([], 0, stdout="NVIDIA H200\nNVIDIA H200\n")

    monkeypatch.setattr(settings_mod.subprocess, "run", fake_run)
    loaded = load_settings(tmp_path)
    (node,) = loaded.nodes
    assert (node.series, node.gpus) == ("h200", 2)
    # One training process per GPU: the profiles say nothing else.
    assert not loaded.jobs_on_cpu
    assert {p.processes_per_node for p in loaded.profiles} == {None}


def test_without_gpus_jobs_run_on_the_cpu_with_the_configured_processes_per_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(settings_mod.shutil, "which", lambda _: None)
    (tmp_path / "server.yaml").write_text("cpu_processes_per_node: 2\n")
    loaded = load_settings(tmp_path)
    assert loaded.jobs_on_cpu
    # Published with the profiles, so the client's checks and --dry-run count 2 per node.
    assert {p.name: p.processes_per_node for p in loaded.profiles} == {"h200": 2, "h100": 2}
    (tmp_path / "server.yaml").write_text("devices: gpu\n")
    assert {p.processes_per_node for p in load_settings(tmp_path).profiles} == {None}
    (tmp_path / "server.yaml").write_text("executor: slurm\n")
    assert not load_settings(tmp_path).jobs_on_cpu  # a Slurm server's host is not its nodes


@pytest.mark.parametrize(
    ("name", "series"),
    [
        ("NVIDIA H200", "h200"),
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA A100-SXM4-80GB", "a100"),
        ("Tesla T4", "t4"),
        ("NVIDIA GeForce RTX 4090", "geforce-rtx-4090"),
    ],
)
def test_a_gpu_name_becomes_a_series(name: str, series: str) -> None:
    assert series_of(name) == series


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A folder every user may enter (0755 up to /): pytest's own tmp dirs are 0700."""
    made = Path(tempfile.mkdtemp(prefix="sf-settings-", dir="/var/tmp"))
    made.chmod(0o755)
    yield made
    shutil.rmtree(made, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="the default job user applies to a root server")
def test_a_root_server_gives_each_run_a_uid_of_its_own_only_where_uids_can_reach_its_storage(
    open_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("STARFORGE_JOB_USER", raising=False)  # the default, unlike the suite
    reachable = Settings(home=open_dir / "home")
    assert reachable.job_uids == [61184, 64511]
    assert reachable.job_isolation() == ("a uid of its own per run (61184-64511)", "")
    assert reachable.separates_jobs
    closed = open_dir / "closed"
    closed.mkdir(mode=0o700)
    behind = Settings(home=closed / "home")
    user, warning = behind.job_isolation()
    assert user == "" and f"cannot enter {closed}" in warning and "job_user" in warning
    assert not behind.job_uids and not behind.separates_jobs
    named = Settings(home=closed / "home", job_user="nobody")
    assert named.job_uids == []  # one user for every job: runs are not apart
    assert named.job_isolation() == ("nobody", "every job runs as nobody: runs are not walled off")
