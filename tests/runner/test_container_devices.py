"""GPUs and containers: a virtual GPU gets no device, a real one needs its CDI spec.

The NVIDIA driver is outside the project: a host "has GPUs" here when an ``nvidia-smi`` is on
PATH (what ``container.host_gpus`` asks), so the tests put a stand-in script there."""

from __future__ import annotations

from pathlib import Path

import pytest

from starforge.contract.env import Binding
from starforge.contract.errors import RunnerError
from starforge.runner import container


def make_test_binding(visible_devices: list[int]) -> Binding:
    run = "/s/runs/alice/proj/grpo/r-gpus000001"
    return Binding(
        run_id="r-gpus000001",
        attempt=1,
        user="alice",
        storage_root="/s",
        run_dir=run,
        work_dir=f"{run}/work",
        out_dir=f"{run}/out",
        log_path=f"{run}/logs/attempt-1.log",
        visible_devices=visible_devices,
        image="registry.example/train:1",
        containers="podman",
    )


@pytest.fixture
def gpu_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\nexit 0\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")


def test_a_gpu_less_host_gives_no_device_and_says_the_gpus_are_virtual(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi anywhere
    said = container.check_devices(make_test_binding(visible_devices=[0, 1]), (tmp_path,))
    assert "GPUs [0, 1] are the virtual inventory's" in said
    assert f"{container.VIRTUAL_GPUS_ENV}=1" in said


@pytest.mark.usefixtures("gpu_host")
def test_real_gpus_without_a_cdi_spec_fail_at_start_naming_nvidia_ctk(tmp_path: Path) -> None:
    cdi = tmp_path / "cdi"
    cdi.mkdir()
    (cdi / "other.yaml").write_text("cdiVersion: 0.5.0\nkind: vendor.example/fpga\n")
    with pytest.raises(RunnerError) as caught:
        container.check_devices(make_test_binding(visible_devices=[0]), (cdi,))
    assert "no CDI spec names them" in caught.value.message
    assert "nvidia-ctk cdi generate" in (caught.value.hint or "")


@pytest.mark.usefixtures("gpu_host")
def test_real_gpus_with_their_cdi_spec_start(tmp_path: Path) -> None:
    (tmp_path / "nvidia.yaml").write_text("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\n")
    assert container.check_devices(make_test_binding(visible_devices=[0]), (tmp_path,)) == ""


def test_a_node_without_gpus_needs_no_spec(tmp_path: Path) -> None:
    assert container.check_devices(make_test_binding(visible_devices=[]), (tmp_path,)) == ""
