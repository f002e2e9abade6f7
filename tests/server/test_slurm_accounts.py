"""A member's attempt on Slurm is submitted as the member's Unix account: the ``sbatch`` command
line, which account a binding names, the run folders handed to it before the submit, and taken
back from it once the attempt's job is over."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest

from starforge.contract.env import make_binding
from starforge.contract.profiles import Pool
from starforge.server.executors.slurm import (
    SlurmError,
    hand_run_to,
    submit_account,
    take_run_back,
)
from starforge.server.executors.slurm_compile import Account, sbatch_argv

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="handing folders over needs root")


def binding_file(tmp_path: Path, job_user: str) -> Path:
    run = tmp_path / "runs" / "ada" / "lab" / "g1" / "r-1"
    pool = Pool(name="all", profile="h200:1", series="h200", nodes=1, gpus_per_node=1)
    binding = make_binding(
        run_id="r-1",
        attempt=1,
        user="ada",
        storage_root=str(tmp_path),
        run_dir=str(run),
        log_path=str(run / "logs" / "attempt-1.log"),
        pools=[pool],
        pool="all",
        node_rank=0,
        nnodes=1,
        visible_devices=[0],
        master_port=29500,
        endpoint="http://127.0.0.1:1",
        run_token="t",
        hf_offline=True,
        job_user=job_user,
    )
    path = run / "state" / "attempt-1.node-0.binding.json"
    path.parent.mkdir(parents=True)
    path.write_text(binding.model_dump_json())
    return path


def test_sbatch_submits_as_the_account_when_one_is_given() -> None:
    assert sbatch_argv() == ["sbatch", "--parsable"]
    ada = Account(name="ada", uid=5001, gid=5002)
    assert sbatch_argv(ada) == ["sbatch", "--parsable", "--uid=5001", "--gid=5002"]


def test_a_binding_without_a_job_user_is_submitted_as_the_server(tmp_path: Path) -> None:
    assert submit_account(binding_file(tmp_path, "")) is None


@needs_root
def test_a_binding_naming_an_account_is_submitted_as_it_with_its_group(tmp_path: Path) -> None:
    entry = pwd.getpwnam("nobody")
    got = submit_account(binding_file(tmp_path, "nobody"))
    assert got == Account(name="nobody", uid=entry.pw_uid, gid=entry.pw_gid)
    assert submit_account(binding_file(tmp_path / "again", "root")) is None  # never --uid=0


@needs_root
def test_an_account_missing_on_the_server_fails_the_start_naming_it(tmp_path: Path) -> None:
    with pytest.raises(SlurmError, match="'no-such-account-x1' does not exist"):
        submit_account(binding_file(tmp_path, "no-such-account-x1"))


@needs_root
def test_the_run_and_the_members_folder_of_runs_become_the_accounts_alone(
    tmp_path: Path,
) -> None:
    path = binding_file(tmp_path, "nobody")
    run = path.parent.parent
    (run / "out" / "ckpt").mkdir(parents=True)
    (run / "out" / "ckpt" / "w.bin").write_bytes(b"x")
    entry = pwd.getpwnam("nobody")
    hand_run_to(Account("nobody", entry.pw_uid, entry.pw_gid), run)
    member = tmp_path / "runs" / "ada"
    for folder in (run, run / "logs", path, run / "out" / "ckpt" / "w.bin"):
        assert (folder.stat().st_uid, folder.stat().st_gid) == (entry.pw_uid, entry.pw_gid)
    assert run.stat().st_mode & 0o777 == 0o700
    # The folders down to the run: root's, the account's group enters them, renames nothing.
    for folder in (member, member / "lab", member / "lab" / "g1"):
        assert (folder.stat().st_uid, folder.stat().st_gid) == (0, entry.pw_gid), folder
        assert folder.stat().st_mode & 0o777 == 0o750, folder
    assert (tmp_path / "runs").stat().st_uid == os.geteuid()  # the store's own folder stays


@needs_root
def test_a_run_taken_back_is_roots_and_its_account_reads_it_and_writes_nothing(
    tmp_path: Path,
) -> None:
    path = binding_file(tmp_path, "nobody")
    run = path.parent.parent
    entry = pwd.getpwnam("nobody")
    nobody = Account("nobody", entry.pw_uid, entry.pw_gid)
    hand_run_to(nobody, run)
    ckpt = run / "out" / "ckpt"
    ckpt.mkdir()
    weights = ckpt / "w.bin"
    weights.write_bytes(b"x")
    os.chmod(weights, 0o600)  # the job's umask: its owner alone read it
    secret = tmp_path / "not-the-runs.txt"
    secret.write_text("root's\n")
    os.chmod(secret, 0o600)
    (run / "out" / "link").symlink_to(secret)  # a job's link out of its run
    os.link(secret, run / "out" / "hard")  # and a hard link to a file not its own
    for made in (ckpt, weights, run / "out" / "link"):
        os.lchown(made, nobody.uid, nobody.gid)

    take_run_back(run, nobody.uid, nobody.gid)

    for item in (run, run / "work", run / "out", ckpt, weights, run / "logs", path):
        st = item.lstat()
        assert (st.st_uid, st.st_gid) == (0, nobody.gid), item
        assert st.st_mode & 0o027 == 0, item  # the group writes nothing, others nothing
    assert weights.stat().st_mode & 0o777 == 0o640  # its owner's outputs: still read by it
    assert ckpt.stat().st_mode & 0o050 == 0o050
    assert run.stat().st_mode & 0o777 == 0o750
    assert (run / "state").stat().st_mode & 0o777 == 0o700  # the runner's records: root's alone
    st = secret.stat()  # neither link was followed
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (0, 0, 0o600)
    assert (run / "out" / "link").lstat().st_uid == 0

    hand_run_to(nobody, run)  # the next attempt: the account's again, to resume from
    for item in (run, run / "out", ckpt, weights, path):
        assert item.lstat().st_uid == nobody.uid, item
    assert weights.stat().st_mode & 0o600 == 0o600
