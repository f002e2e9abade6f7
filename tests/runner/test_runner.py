"""The runner on its own: a real package in a real blob store, run as a real process.

No server here (an empty endpoint turns lifecycle reports off), so no sockets: what the runner
leaves on disk (work dir, log, exit record) is what the control plane reads.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from starforge.catalog.loader import get_method
from starforge.contract.env import Binding
from starforge.contract.errors import RunnerError
from starforge.contract.jobspec import FileEntry, JobSpec, Manifest, Provenance
from starforge.contract.layout import RunLayout, StorageLayout
from starforge.runner.unpack import unpack


def put_blob(root: Path, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    path = StorageLayout(root).blob(digest)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return digest


def make_run(tmp_path: Path, script: str) -> Path:
    """A run dir with state/run.json and a binding; returns the binding's path."""
    storage = tmp_path / "storage"
    files = {"experiments/c1/train.sh": script.encode(), "common/util.txt": b"shared\n"}
    manifest = Manifest(
        files=[
            FileEntry(
                path=p, sha256=put_blob(storage, d), size=len(d), executable=p.endswith(".sh")
            )
            for p, d in files.items()
        ]
    )
    spec = JobSpec(
        project="lab",
        experiment="c1",
        method=get_method("custom/custom").ref(),
        profiles=["h200:1"],
        provenance=Provenance(git_commit="a" * 40, client_version="0.1.0"),
    )
    layout = StorageLayout(storage).run("u", "lab", "c1", "r-0000000001")
    run_dir = layout.dir
    layout.state.mkdir(parents=True)
    layout.run_json.write_text(
        json.dumps(
            {"spec": spec.model_dump(mode="json"), "manifest": manifest.model_dump(mode="json")}
        )
    )
    binding = Binding(
        run_id="r-0000000001",
        attempt=1,
        user="u",
        storage_root=str(storage),
        run_dir=str(run_dir),
        work_dir=str(layout.work),
        out_dir=str(layout.out),
        log_path=str(layout.log(1)),
        visible_devices=[0],
    )
    path = layout.binding(1, 0)
    path.write_text(binding.model_dump_json())
    return path


def layout_of(binding_path: Path) -> RunLayout:
    return RunLayout(binding_path.parent.parent)


def test_runner_unpacks_runs_the_entrypoint_and_logs_its_output(tmp_path: Path) -> None:
    bp = make_run(
        tmp_path,
        'echo "hello from $FORGE_EXPERIMENT on $FORGE_RUN_ID"\n'
        'cat "$FORGE_WORK_DIR/common/util.txt"\n'
        'echo "out=$FORGE_OUT_DIR gpus=$CUDA_VISIBLE_DEVICES"\n',
    )
    code = subprocess.run([sys.executable, "-m", "starforge.runner", str(bp)]).returncode
    run = layout_of(bp)
    log = run.log(1).read_text()
    assert code == 0
    assert "hello from c1 on r-0000000001" in log
    assert "shared" in log
    assert f"out={run.out} gpus=0" in log
    assert json.loads(run.exit_record(1, 0).read_text())["exit_code"] == 0


def test_a_failing_entrypoint_exit_code_is_kept(tmp_path: Path) -> None:
    bp = make_run(tmp_path, "echo boom >&2\nexit 7\n")
    code = subprocess.run([sys.executable, "-m", "starforge.runner", str(bp)]).returncode
    run = layout_of(bp)
    assert code == 7
    assert "boom" in run.log(1).read_text()
    record = json.loads(run.exit_record(1, 0).read_text())
    assert record == {**record, "exit_code": 7, "end_reason": "exit_nonzero"}


def test_sigterm_to_the_process_group_reaches_the_training_and_is_reported(
    tmp_path: Path,
) -> None:
    bp = make_run(
        tmp_path, "trap 'echo saving; exit 143' TERM\necho ready\nwhile true; do sleep 0.05; done\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "starforge.runner", str(bp)], start_new_session=True
    )
    log = layout_of(bp).log(1)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (log.exists() and "ready" in log.read_text()):
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=30) == 143
    assert "saving" in log.read_text()


def test_a_corrupt_blob_fails_the_attempt_instead_of_running_it(tmp_path: Path) -> None:
    bp = make_run(tmp_path, "echo should-not-run\n")
    data = json.loads(layout_of(bp).run_json.read_text())
    digest = data["manifest"]["files"][1]["sha256"]
    StorageLayout(tmp_path / "storage").blob(digest).write_bytes(b"tampered")
    code = subprocess.run([sys.executable, "-m", "starforge.runner", str(bp)]).returncode
    log = layout_of(bp).log(1).read_text()
    assert code == 2
    assert "is corrupt" in log
    assert "should-not-run" not in log


def test_unpack_reuses_a_complete_work_dir(tmp_path: Path) -> None:
    storage = tmp_path / "s"
    manifest = Manifest(files=[FileEntry(path="a.txt", sha256=put_blob(storage, b"a"), size=1)])
    assert unpack(manifest, storage, tmp_path / "work") == 1
    assert unpack(manifest, storage, tmp_path / "work") == 0
    assert (tmp_path / "work" / "a.txt").read_text() == "a"


def test_unpack_of_a_missing_blob_says_to_resubmit(tmp_path: Path) -> None:
    manifest = Manifest(files=[FileEntry(path="a.txt", sha256="0" * 64, size=1)])
    with pytest.raises(RunnerError, match="resubmit"):
        unpack(manifest, tmp_path / "s", tmp_path / "work")
    assert not (tmp_path / "work").exists()
