"""Members' jobs on Slurm run under their own Unix accounts, on the project's real cluster.

A root server with ``executor: slurm``, its storage in a world-traversable folder (as a lab's
/srv/starforge would be), two members mapped (``sf admin user set-unix``) to two Unix accounts
the test creates. Each member's job is submitted as its account (``sbatch --uid/--gid``: Slurm
lists the job as that user), runs as it, in run folders owned by it and closed to the other
account; once its Slurm job is over the server takes the run back (root's, the account's group
reads it), so the member's next job reads that run's outputs and writes nothing into it. A third,
unmapped member is refused at submit with the admin's fix.

The runners run as the members' accounts, so their interpreter must be one every account may
run: the system Python with the project's packages on its path (the venv's Python lives under
root's closed home here), as ``runner_command`` in server.yaml.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from starforge.project import experiments
from starforge.project.lab import Lab
from tests.conftest import Result, commit_all
from tests.security.test_job_isolation import probes as line_probes
from tests.security.test_run_identities import Member, member
from tests.slurm.conftest import ROOT, SlurmCluster, wait_for
from tests.slurm.starforge_on_slurm import (
    IMAGE,
    job_ids,
    logs_of,
    slurm_jobs,
    slurm_server,
)

pytestmark = pytest.mark.slurm
SYSTEM_PYTHON = Path("/usr/bin/python3")
WHO = """#!/usr/bin/env bash
set -u
echo "probe: user=$(id -un) home=$HOME"
echo "mine" > "$FORGE_OUT_DIR/result.txt"
"""
PROBE = """#!/usr/bin/env bash
set -u
echo "probe: user=$(id -un)"
source "$FORGE_EXP_DIR/target.env"
try() { if eval "$2" >/dev/null 2>&1; then echo "probe: $1=YES"; else echo "probe: $1=no"; fi; }
try run-dir "ls $TARGET_RUN"
try out "cat $TARGET_RUN/out/result.txt"
try logs "cat $TARGET_RUN/logs/attempt-1.log"
try binding "cat $TARGET_RUN/state/attempt-1.node-0.binding.json"
try member-runs "ls $TARGET_MEMBER_RUNS"
try write "touch $TARGET_RUN/out/bob-was-here"
"""
LATER = """#!/usr/bin/env bash
set -u
echo "probe: user=$(id -un)"
source "$FORGE_EXP_DIR/target.env"
try() { if eval "$2" >/dev/null 2>&1; then echo "probe: $1=YES"; else echo "probe: $1=no"; fi; }
try read "grep -q mine $TARGET_RUN/out/result.txt"
try write "touch $TARGET_RUN/out/later-was-here"
try rewrite "echo forged > $TARGET_RUN/out/result.txt"
try remove "rm -f $TARGET_RUN/out/result.txt"
try mkdir "mkdir $TARGET_RUN/out/later"
try work "touch $TARGET_RUN/work/later-was-here"
try swap-out "mv $TARGET_RUN/out $TARGET_RUN/out-old"
try swap-run "mv $TARGET_RUN $TARGET_RUN-old"
try chmod "chmod u+w $TARGET_RUN/out"
"""


@pytest.fixture(scope="module")
def unix_users() -> Iterator[tuple[str, str]]:
    """Two Unix accounts of the test's own (removed at the end), each with its own group."""
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        pytest.skip("creating Unix accounts needs root and useradd")
    tag = uuid.uuid4().hex[:6]
    names = (f"sfa-{tag}", f"sfb-{tag}")
    made: list[str] = []
    try:
        for name in names:
            subprocess.run(
                ["useradd", "--no-create-home", "--user-group", "--shell", "/bin/bash", name],
                check=True,
                capture_output=True,
            )
            made.append(name)
        yield names
    finally:
        for name in made:
            subprocess.run(["userdel", name], check=False, capture_output=True)


@pytest.fixture(scope="module")
def open_root() -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="sf-accounts-", dir="/var/tmp"))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


def runner_command() -> list[str]:
    """The runner on the system Python, with this checkout's packages: any account runs it."""
    if not SYSTEM_PYTHON.exists():
        pytest.skip("no system Python that every account may run")
    site = [p for p in sys.path if p.endswith("site-packages") and p.startswith(str(ROOT))]
    path = ":".join([str(ROOT / "src"), *site])
    return ["/usr/bin/env", f"PYTHONPATH={path}", str(SYSTEM_PYTHON), "-m", "starforge.runner"]


@pytest.fixture(scope="module")
def server_home(
    slurm_cluster: SlurmCluster, open_root: Path, unix_users: tuple[str, str]
) -> Iterator[Path]:
    settings = {
        "storage_root": str(open_root / "st"),
        "runner_command": runner_command(),
        "heartbeat_s": 0.5,
    }
    with pytest.MonkeyPatch.context() as mp:
        # The suite's servers opt out of isolation (tests/conftest.py); this one keeps the
        # defaults a lab would.
        for key in ("STARFORGE_JOB_USER", "STARFORGE_ISOLATION"):
            mp.delenv(key, raising=False)
        with slurm_server(open_root / "home", settings) as home:
            yield home


@pytest.fixture
def sf_home(server_home: Path) -> Path:
    return server_home


def job_lab(new_lab: Callable[..., Lab], name: str, script: str, extra: dict[str, str]) -> Lab:
    made = new_lab(f"{name}-lab")
    experiments.new_experiment(made, name, "custom/custom")
    folder = made.root / "experiments" / name
    (folder / "train.sh").write_text(script)
    (folder / "config.yaml").write_text("starforge:\n  observability: platform\n")
    (folder / "lab-id.txt").write_text(f"{uuid.uuid4()}\n")
    for path, text in extra.items():
        (folder / path).write_text(text)
    commit_all(made.root, f"add {name}")
    return made


def submit(who: Member, lab: Lab, exp: str) -> Result:
    return who("submit", exp, "--profile", "h200:1", "--image", IMAGE, "--json", cwd=lab.root)


def run_of(who: Member, run_id: str) -> dict[str, object]:
    got = who("job", "status", run_id, "--json")
    assert got.code == 0, got.err
    body = got.json()
    assert isinstance(body, dict)
    return body


def finished(who: Member, run_id: str) -> dict[str, object]:
    def done() -> dict[str, object] | None:
        run = run_of(who, run_id)
        return run if run["status"] in ("succeeded", "failed", "stopped") else None

    return wait_for(done, f"run {run_id} to end", 180)


def probes(log: str) -> dict[str, str]:
    found = {}
    for line in log.splitlines():
        if line.startswith("probe: "):
            for pair in line.removeprefix("probe: ").split():
                key, _, value = pair.partition("=")
                found[key] = value
    return found


def test_members_jobs_run_as_their_unix_accounts_and_cannot_reach_each_others_runs(
    sf: Callable[..., Result],
    monkeypatch: pytest.MonkeyPatch,
    new_lab: Callable[..., Lab],
    unix_users: tuple[str, str],
) -> None:
    ua, ub = unix_users
    alice, bob = member(sf, monkeypatch, "alice"), member(sf, monkeypatch, "bob")
    for name, account in (("alice", ua), ("bob", ub)):
        got = sf("admin", "user", "set-unix", name, account, "--json")
        assert got.code == 0, got.err
        assert got.json()["unix_user"] == account  # type: ignore[index, call-overload]
    listed = sf("admin", "user", "ls", "--json").json()
    assert {u["name"]: u["unix_user"] for u in listed}["alice"] == ua  # type: ignore[index, union-attr]

    # Alice's job: submitted as her account, and its folders are hers alone.
    got = submit(alice, job_lab(new_lab, "who", WHO, {}), "who")
    assert got.code == 0, got.err
    a_id = str(got.json()["run_id"])  # type: ignore[index, call-overload]
    a_run = finished(alice, a_id)
    a_log = logs_of(a_run)
    assert a_run["status"] == "succeeded", a_log
    assert probes(a_log)["user"] == ua
    assert not probes(a_log)["home"].startswith("/root")
    [job] = slurm_jobs(job_ids(a_run)[0])
    assert job["user_name"] == ua  # Slurm's own record: submitted as her account
    a_dir = Path(str(a_run["run_dir"]))
    a_gid = pwd.getpwnam(ua).pw_gid
    # Its job is over: the server takes the run back, root's, her account's group reading it.
    wait_for(lambda: a_dir.stat().st_uid == 0, "the server to take alice's run back", 60)
    for path in (a_dir, a_dir / "out", a_dir / "out" / "result.txt", a_dir / "logs"):
        assert (path.stat().st_uid, path.stat().st_gid) == (0, a_gid), path
        assert path.stat().st_mode & 0o027 == 0, path  # her group writes nothing, others nothing
    assert a_dir.stat().st_mode & 0o777 == 0o750
    member_runs = a_dir.parents[2]  # <root>/runs/alice: root's, her group enters it
    assert (member_runs.stat().st_uid, member_runs.stat().st_gid) == (0, a_gid)
    assert member_runs.stat().st_mode & 0o777 == 0o750

    # Her next job (the same account) reads what the finished run wrote and changes none of it.
    later_env = {"target.env": f"TARGET_RUN={a_dir}\n"}
    got = submit(alice, job_lab(new_lab, "later", LATER, later_env), "later")
    assert got.code == 0, got.err
    later = finished(alice, str(got.json()["run_id"]))  # type: ignore[index, call-overload]
    later_log = logs_of(later)
    assert later["status"] == "succeeded", later_log
    seen = probes(later_log)
    assert seen["user"] == ua, later_log
    assert seen["read"] == "YES", later_log
    tries = ("write", "rewrite", "remove", "mkdir", "work", "swap-out", "swap-run", "chmod")
    assert {k: seen[k] for k in tries} == dict.fromkeys(tries, "no"), later_log
    assert (a_dir / "out" / "result.txt").read_text() == "mine\n"
    assert not (a_dir / "out" / "later-was-here").exists()
    shown = alice("job", "logs", a_id)  # and she still reads it through the server
    assert shown.code == 0 and f"user={ua}" in shown.out, shown.err

    # Bob's job, knowing where Alice's run is, can neither list, read nor write any of it.
    target = f"TARGET_RUN={a_dir}\nTARGET_MEMBER_RUNS={a_dir.parents[2]}\n"
    got = submit(bob, job_lab(new_lab, "probe", PROBE, {"target.env": target}), "probe")
    assert got.code == 0, got.err
    b_id = str(got.json()["run_id"])  # type: ignore[index, call-overload]
    b_run = finished(bob, b_id)
    b_log = logs_of(b_run)
    assert b_run["status"] == "succeeded", b_log
    seen = probes(b_log)
    assert seen["user"] == ub, b_log
    tries = ("run-dir", "out", "logs", "binding", "member-runs", "write")
    assert {k: seen[k] for k in tries} == dict.fromkeys(tries, "no"), b_log
    assert Path(str(b_run["run_dir"])).stat().st_uid == pwd.getpwnam(ub).pw_uid
    assert (a_dir / "out" / "result.txt").read_text() == "mine\n"
    assert not (a_dir / "out" / "bob-was-here").exists()


def test_an_unmapped_member_is_refused_at_submit_with_the_admins_fix(
    sf: Callable[..., Result], monkeypatch: pytest.MonkeyPatch, new_lab: Callable[..., Lab]
) -> None:
    carol = member(sf, monkeypatch, "carol")
    member(sf, monkeypatch, "dave")  # a server of several users
    got = submit(carol, job_lab(new_lab, "who", WHO, {}), "who")
    assert got.code != 0
    assert "carol has no Unix account" in got.err
    assert "sf admin user set-unix carol" in got.err
    listed = carol("job", "ls", "--json")
    assert listed.code == 0 and listed.json() == [], listed.out


def test_mapping_refuses_an_account_that_is_missing_root_or_another_members(
    sf: Callable[..., Result], unix_users: tuple[str, str]
) -> None:
    ua, _ = unix_users
    sf("admin", "user", "add", "erin", "--json")
    missing = sf("admin", "user", "set-unix", "erin", "no-such-account-x1")
    assert missing.code != 0 and "no Unix account 'no-such-account-x1'" in missing.err
    root = sf("admin", "user", "set-unix", "erin", "root")
    assert root.code != 0 and "never run as root" in root.err
    sf("admin", "user", "add", "frank", "--json")
    sf("admin", "user", "set-unix", "frank", ua)  # unless another user holds it already
    taken = sf("admin", "user", "set-unix", "erin", ua)
    assert taken.code != 0 and f"the Unix account {ua!r} is already" in taken.err
    bad = sf("admin", "user", "set-unix", "erin", "Not A Name")
    assert bad.code == 2
    sf("admin", "user", "set-unix", "frank", "--unset")


VICTIM = r"""#!/usr/bin/env bash
set -u
echo "probe: user=$(id -un)"
echo "probe: data=$(cat "$FORGE_TRAIN_DATA")"
ca=${{STARFORGE_CA_FILE:+--cacert=$STARFORGE_CA_FILE}}
point='{{"steps": [{{"step": 1, "values": {{"loss": 1.0}}}}]}}'
echo "probe: ingest=$(curl -s -o /dev/null -w '%{{http_code}}' $ca --data "$point" \
  -H "X-StarForge-Run-Token: $STARFORGE_TOKEN" -H 'Content-Type: application/json' \
  "$STARFORGE_ENDPOINT/api/v1/runs/$STARFORGE_RUN_ID/ingest")"
echo "$$" > "$FORGE_OUT_DIR/pid"
while [[ ! -e "{gates}/$FORGE_RUN_ID" ]]; do sleep 0.05; done
echo "probe: intact=$(sha256sum < "$FORGE_EXP_DIR/train.sh" | cut -c1-12)"
echo "victory" > "$FORGE_OUT_DIR/result.txt"
"""
ATTACKER = r"""#!/usr/bin/env bash
set -u
source "$FORGE_EXP_DIR/target.env"
echo "probe: user=$(id -un)"
try() { if eval "$2" >/dev/null 2>&1; then echo "probe: $1=YES"; else echo "probe: $1=no"; fi; }
try environ "grep -q TOKEN /proc/$VICTIM_PID/environ"
try secret-file "cat $VICTIM_SECRET_FILE"
try package "cat $VICTIM_WORK/experiments/victim/train.sh"
try rewrite "echo 'echo bob says done' > $VICTIM_WORK/experiments/victim/train.sh"
try out "ls $VICTIM_RUN/out"
try logs "cat $VICTIM_RUN/logs/attempt-1.log"
try binding "cat $VICTIM_RUN/state/attempt-1.node-0.binding.json"
try kill "kill -9 $VICTIM_PID"
try blobs "ls $FORGE_STORAGE_ROOT/blobs"
try cache "cat $FORGE_STORAGE_ROOT/cache/datasets/alice/private-set/v1/rows.jsonl"
try data-view "cat $VICTIM_RUN/datasets/alice/private-set/v1/rows.jsonl"
try hf-cache "touch $FORGE_STORAGE_ROOT/cache/hf/poison"
echo "probe: hf-home=$HF_HOME"
# Ingest into A's run: with A's token, were it to be found (its environ, its binding), and with
# B's own job token naming A's run.
stolen=$(tr '\0' '\n' < "/proc/$VICTIM_PID/environ" 2>/dev/null | sed -n 's/^STARFORGE_TOKEN=//p')
stolen=${stolen:-$(grep -ho '"job_token": *"[^"]*"' "$VICTIM_RUN"/state/*.binding.json 2>/dev/null \
  | head -n1 | sed 's/.*: *"\(.*\)"/\1/')}
echo "probe: stolen-token=${stolen:+found}"
post() {
  curl -s -o /dev/null -w '%{http_code}' ${STARFORGE_CA_FILE:+--cacert "$STARFORGE_CA_FILE"} \
    -H "X-StarForge-Run-Token: $1" -H 'Content-Type: application/json' \
    --data '{"steps": [{"step": 7, "values": {"loss": 666.0}}]}' \
    "$STARFORGE_ENDPOINT/api/v1/runs/$VICTIM_ID/ingest"
}
echo "probe: ingest-stolen=$(post "${stolen:-none}")"
echo "probe: ingest-own-token=$(post "$STARFORGE_TOKEN")"
"""


def test_a_members_job_on_slurm_cannot_reach_another_members_running_job_secrets_or_data(
    sf: Callable[..., Result],
    monkeypatch: pytest.MonkeyPatch,
    new_lab: Callable[..., Lab],
    unix_users: tuple[str, str],
    open_root: Path,
    tmp_path: Path,
) -> None:
    """The attack of tests/security/test_run_identities.py on Slurm: B's job, knowing where
    A's running job, its secret file and its private dataset are, tries each; every try fails,
    and A's run succeeds with its script and output intact."""
    ua, ub = unix_users
    for earlier in ("alice", "bob"):  # this module's server is shared: free the accounts
        sf("admin", "user", "set-unix", earlier, "--unset")
    alice, bob = member(sf, monkeypatch, "alice2"), member(sf, monkeypatch, "bob2")
    for name, account in (("alice2", ua), ("bob2", ub)):
        assert sf("admin", "user", "set-unix", name, account).code == 0
    pem = tmp_path / "key.pem"
    pem.write_text("alice's private key\n")
    assert alice("secret", "set", "KEY_PEM", "--from-file", str(pem)).code == 0
    hf = tmp_path / "hf"
    hf.write_text("hf_alice_token_3e5f\n")
    assert alice("secret", "set", "HF_TOKEN", "--from-file", str(hf)).code == 0
    rows = tmp_path / "private-set"
    rows.mkdir()
    (rows / "rows.jsonl").write_text('{"row": "alice unreleased"}\n')
    assert alice("dataset", "push", "private-set", "v1", str(rows)).code == 0
    gates = Path(tempfile.mkdtemp(prefix="gates-", dir=open_root))
    gates.chmod(0o755)
    victim_lab = job_lab(new_lab, "victim", VICTIM.format(gates=gates), {})
    folder = victim_lab.root / "experiments" / "victim"
    (folder / "config.yaml").write_text(
        "starforge:\n  observability: platform\n"
        "secrets:\n  - {name: KEY_PEM, as: file}\n  - {name: HF_TOKEN, as: env}\n"
        "data:\n  train:\n    dataset: alice2/private-set@v1\n"
    )
    commit_all(victim_lab.root, "the victim's secrets and data")
    got = alice(
        "submit", "victim", "--profile", "h200:1", "--image", IMAGE, "--train-data",
        "rows.jsonl", "--json", cwd=victim_lab.root,
    )  # fmt: skip
    assert got.code == 0, got.err
    victim = str(got.json()["run_id"])  # type: ignore[index, call-overload]
    run_dir = Path(str(run_of(alice, victim)["run_dir"]))
    pid_file = run_dir / "out" / "pid"
    wait_for(lambda: pid_file.is_file() and pid_file.read_text().strip(), "the victim's pid")
    pid = pid_file.read_text().strip()
    secret_file = next(
        entry.split("=", 1)[1]
        for entry in Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0")
        if entry.startswith("KEY_PEM_FILE=")
    )
    env = (
        f"VICTIM_PID={pid}\nVICTIM_SECRET_FILE={secret_file}\nVICTIM_RUN={run_dir}\n"
        f"VICTIM_WORK={run_dir / 'work'}\nVICTIM_ID={victim}\n"
    )
    got = submit(bob, job_lab(new_lab, "attacker", ATTACKER, {"target.env": env}), "attacker")
    assert got.code == 0, got.err
    b_run = finished(bob, str(got.json()["run_id"]))  # type: ignore[index, call-overload]
    b_log = logs_of(b_run)
    assert b_run["status"] == "succeeded", b_log
    seen = probes(b_log)
    assert seen["user"] == ub, b_log
    tries = (
        "environ", "secret-file", "package", "rewrite", "out", "logs", "binding", "kill",
        "blobs", "cache", "data-view", "hf-cache",
    )  # fmt: skip
    assert {k: seen[k] for k in tries} == dict.fromkeys(tries, "no"), b_log
    assert seen["hf-home"].startswith(str(b_run["run_dir"]))  # B's own cache, in B's run
    assert seen["stolen-token"] == "", b_log  # no token of A's to be found
    refused = ("401", "403", "404")
    assert seen["ingest-stolen"] in refused and seen["ingest-own-token"] in refused, b_log

    (gates / victim).touch()
    a_run = finished(alice, victim)
    a_log = logs_of(a_run)
    assert a_run["status"] == "succeeded", a_log
    mine = line_probes(a_log)
    assert mine["user"] == ua
    assert mine["data"] == '{"row": "alice unreleased"}'  # through the server's staging
    expected = VICTIM.format(gates=gates).encode()
    assert mine["intact"] == hashlib.sha256(expected).hexdigest()[:12]
    assert (run_dir / "out" / "result.txt").read_text() == "victory\n"
    assert "hf_alice_token_3e5f" not in b_log
    # A's own point went in with A's token; B's did not, by any token.
    assert mine["ingest"] == "200", a_log
    curves = alice("job", "metrics", victim, "--json")
    assert curves.code == 0, curves.err
    series = {s["key"]: s for s in curves.json()["series"]}  # type: ignore[index, union-attr]
    assert series["loss"]["steps"] == [1] and series["loss"]["values"] == [1.0], curves.out
