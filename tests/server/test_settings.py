"""Settings: defaults derived from home, the YAML file, environment variables, the inventory."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError

from starforge.server import settings as settings_mod
from starforge.server.settings import load_settings, series_of, virtual_inventory


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
    (node,) = load_settings(tmp_path).nodes
    assert (node.series, node.gpus) == ("h200", 2)


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
