"""The inventory as Slurm reports it, the series→partition setting, and the runner under Slurm."""

from __future__ import annotations

from typing import Any

import pytest

from starforge.contract.env import Binding
from starforge.contract.errors import Rejected
from starforge.contract.profiles import Pool
from starforge.runner import slurm as runner_slurm
from starforge.server.executors.slurm import parse_ref
from starforge.server.executors.slurm_inventory import check_pools, inventory, parse_nodes
from starforge.server.settings import NodeDef, SlurmSettings, load_settings


def node(name: str, gres: str, partitions: list[str], state: Any = "idle", **kw: Any) -> dict:
    return {"name": name, "gres": gres, "partitions": partitions, "state": state,
            "state_flags": kw.get("flags", []), "address": "10.0.0.1"}  # fmt: skip


SINFO = {
    "nodes": [
        node("h200-1", "gpu:h200:8", ["h200"]),
        node("h200-2", "gpu:h200:8(S:0-1)", ["h200"], state="mixed"),
        node("h200-3", "gpu:h200:8", ["h200"], state="down"),
        node("h200-4", "gpu:h200:8", ["h200"], state="idle", flags=["DRAIN"]),
        node("h100-1", "gpu:h100:8", ["h100"], state=["ALLOCATED"]),
        node("cpu-1", "", ["cpu"]),
    ]
}


def test_down_drained_and_gpu_less_nodes_are_left_out_of_the_inventory() -> None:
    assert inventory(parse_nodes(SINFO), SlurmSettings()) == [
        NodeDef(name="h100-1", series="h100", gpus=8),
        NodeDef(name="h200-1", series="h200", gpus=8),
        NodeDef(name="h200-2", series="h200", gpus=8),
    ]


def test_a_mapped_gres_type_is_counted_under_its_series() -> None:
    settings = SlurmSettings.model_validate(
        {"partitions": {"H200-SXM": {"partition": "gpu-big", "gres_type": "h200"}}}
    )
    series = {n.series for n in inventory(parse_nodes(SINFO), settings)}
    assert series == {"H200-SXM", "h100"}


def pool(series: str) -> Pool:
    return Pool(name="all", profile=series, series=series, nodes=1, gpus_per_node=1)


def test_a_series_maps_to_the_partition_of_its_own_name_by_default() -> None:
    check_pools([pool("h200"), pool("h100")], parse_nodes(SINFO), SlurmSettings())


def test_a_series_without_a_partition_is_rejected_naming_the_series_and_the_setting() -> None:
    with pytest.raises(Rejected) as caught:
        check_pools([pool("a100")], parse_nodes(SINFO), SlurmSettings())
    err = caught.value
    assert "GPU series 'a100' has no Slurm partition" in err.message
    assert "slurm.partitions.a100" in str(err.hint)
    assert "partitions here: cpu, h100, h200" in str(err.hint)
    assert err.details == {"series": "a100", "setting": "slurm.partitions"}


def test_a_series_mapped_to_a_missing_partition_says_where_it_points() -> None:
    settings = SlurmSettings.model_validate(
        {"partitions": {"h200": {"partition": "gone", "gres_type": "h200"}}}
    )
    with pytest.raises(Rejected, match="it maps to partition 'gone'"):
        check_pools([pool("h200")], parse_nodes(SINFO), settings)


def test_the_executor_and_its_mapping_come_from_server_yaml_or_the_environment(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "server.yaml").write_text(
        "executor: slurm\nslurm:\n  partitions:\n    h200: {partition: gpu, gres_type: h200}\n"
        "  pyxis: true\ninventory: []\n"
    )
    settings = load_settings(tmp_path)
    assert settings.executor == "slurm" and settings.slurm.pyxis
    assert settings.slurm.target("h200").partition == "gpu"
    assert settings.slurm.target("h100").model_dump() == {"partition": "h100", "gres_type": "h100"}
    monkeypatch.setenv("STARFORGE_EXECUTOR", "local")
    assert load_settings(tmp_path).executor == "local"


def test_references_name_the_job_and_the_rank() -> None:
    assert parse_ref("slurm:42:1") == (42, 1)
    assert parse_ref("slurm:42") == (42, None)
    with pytest.raises(Exception, match="not a Slurm executor reference"):
        parse_ref("local:42")


def binding() -> Binding:
    return Binding(
        run_id="r-1", attempt=1, user="ada", storage_root="/s", run_dir="/s/r", work_dir="/s/r/w",
        out_dir="/s/r/o", log_path="/s/r/l", node_rank=1, nnodes=2, visible_devices=[0, 1],
    )  # fmt: skip


def test_under_slurm_the_runner_takes_the_gpus_and_master_slurm_allocated() -> None:
    env = {
        "STARFORGE_SLURM_JOB_ID": "77",
        "CUDA_VISIBLE_DEVICES": "4,5",
        "STARFORGE_SLURM_MASTER_ADDR": "10.0.0.7",
    }
    got = runner_slurm.apply(binding(), env)
    assert (got.visible_devices, got.master_addr) == ([4, 5], "10.0.0.7")
    assert runner_slurm.record_fields(got, env) == {"slurm_job_id": 77, "node_rank": 1}


def test_outside_slurm_the_binding_is_the_servers() -> None:
    env = {"CUDA_VISIBLE_DEVICES": "4,5"}
    assert runner_slurm.apply(binding(), env) == binding()
    assert runner_slurm.record_fields(binding(), env) == {}


def test_slurms_job_state_says_whether_the_platform_ended_the_job() -> None:
    line = "JobId=7 JobName=sf.r-1.1 JobState=NODE_FAIL Reason=None"
    assert runner_slurm.job_state(line) == "NODE_FAIL"
    assert runner_slurm.PLATFORM_ENDS[runner_slurm.job_state(line)].value == "node_lost"
