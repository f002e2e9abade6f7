"""A custom/custom run inside its image, through the real runner and real podman."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from starforge.contract.layout import RunLayout
from tests.containers.conftest import containers_named, make_image, make_run

pytestmark = [pytest.mark.containers, pytest.mark.usefixtures("podman")]

MARKER = b"only-in-the-image\n"


def run_runner(binding_path: Path) -> tuple[int, str, dict[str, object]]:
    code = subprocess.run([sys.executable, "-m", "starforge.runner", str(binding_path)]).returncode
    layout = RunLayout(binding_path.parent.parent)
    record = json.loads(layout.exit_record(1, 0).read_text())
    return code, layout.log(1).read_text(), record


def run_id_of(binding_path: Path) -> str:
    return json.loads(binding_path.read_text())["run_id"]


def test_train_sh_sees_the_images_filesystem_and_its_exit_code_and_log_come_back(
    tmp_path: Path,
) -> None:
    image = make_image({"etc/sf-marker": MARKER})
    bp = make_run(
        tmp_path,
        "cat /etc/sf-marker\n"
        'test -e /etc/debian_version && echo "host fs visible" || echo "no host fs"\n'
        'echo "run=$FORGE_RUN_ID out=$FORGE_OUT_DIR"\n'
        'echo result > "$FORGE_OUT_DIR/result.txt"\n'
        "exit 3\n",
        image=image,
    )
    code, log, record = run_runner(bp)
    assert code == 3
    assert record["exit_code"] == 3 and record["end_reason"] == "exit_nonzero"
    assert "only-in-the-image" in log
    assert "no host fs" in log and "host fs visible" not in log
    assert f"run={run_id_of(bp)} out=" in log
    assert f"inside the image {image}" in log
    out = Path(json.loads(bp.read_text())["out_dir"])
    assert (out / "result.txt").read_text() == "result\n"  # the out dir is the host's
    assert containers_named(f"sf-{run_id_of(bp)}-1-0") == []


def test_an_image_without_the_shell_is_a_clear_startup_failure(tmp_path: Path) -> None:
    image = make_image({"etc/sf-marker": MARKER}, shell=False)
    bp = make_run(tmp_path, "echo never\n", image=image)
    code, log, record = run_runner(bp)
    assert code != 0
    assert record["end_reason"] == "startup_failed"
    assert f"startup failed: the image {image} could not start the job's program 'bash'" in log
    assert containers_named(f"sf-{run_id_of(bp)}-1-0") == []


def test_with_containers_none_a_run_with_an_image_runs_on_the_host_and_says_so(
    tmp_path: Path,
) -> None:
    bp = make_run(tmp_path, "test -e /etc/sf-marker || echo on-the-host\n", image="tiny:1",
                  containers="")  # fmt: skip
    code, log, _ = run_runner(bp)
    assert code == 0
    assert "on-the-host" in log
    assert "the image tiny:1 is not used: this server has no container runtime" in log


def test_a_container_killed_for_memory_ends_with_reason_oom(tmp_path: Path) -> None:
    image = make_image({})
    # A shell string that doubles each turn passes the 16 MB cap after ~24 turns.
    bp = make_run(
        tmp_path, 'x=0123456789; while true; do x="$x$x"; done\n', image=image,
        STARFORGE_CONTAINER_MEMORY="16m",
    )  # fmt: skip
    code, log, record = run_runner(bp)
    assert record["end_reason"] == "oom", log
    assert "killed for memory (OOM)" in log
    assert code == 137


def test_a_python_job_in_an_image_without_starforge_imports_the_mounted_report(
    tmp_path: Path,
) -> None:
    # The image: an empty root whose /bin and /lib are the host's /usr (mounted read-only), the
    # host's Python install and virtualenv mounted at their own paths (docs/containers.md).
    links = {"bin": "usr/bin", "lib": "usr/lib", "lib64": "usr/lib64", "sbin": "usr/sbin"}
    image = make_image({"etc/sf-marker": MARKER}, shell=False, links=links)
    mounts = ",".join(sorted({"/usr", sys.base_prefix, sys.prefix}))
    bp = make_run(
        tmp_path,
        f"cat /etc/sf-marker\n{sys.executable} -c '"
        'import starforge.report as r; r.log({"loss": 1.0}, step=1); r.finish(); '
        'print("report from", r.__file__)\'\n',
        image=image,
        STARFORGE_CONTAINER_MOUNTS=mounts,
    )
    code, log, record = run_runner(bp)
    assert code == 0, log
    assert record["end_reason"] == "completed"
    assert "only-in-the-image" in log
    assert "report from /opt/starforge/python/starforge/report/__init__.py" in log
