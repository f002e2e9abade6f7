"""Two members' jobs on a root server with default settings: each run has a uid of its own, and B's
job, knowing everything about A's run, can neither read, signal nor change it.

A real embedded server as root, its home and storage in a world-traversable folder under /var/tmp
(as a lab's /srv/starforge would be), no ``job_user``: each attempt takes a uid of the server's
range. A's job waits on a gate file the test creates while B's job tries, from the inside, what a
curious or compromised member would; then A's job finishes and its run succeeds intact.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from starforge.cli.main import main
from starforge.client import config
from starforge.project import experiments
from starforge.project.lab import Lab
from tests.conftest import Result, commit_all
from tests.integration.conftest import wait_for
from tests.integration.test_lifecycle import wait_until

from .test_job_isolation import IMAGE, as_root, open_root, probes

__all__ = ["open_root"]  # a fixture this module uses

RANGE = (61184, 64511)  # the default job_uid_range
VICTIM = r"""#!/usr/bin/env bash
set -u
echo "probe: uid=$(id -u) gid=$(id -g)"
echo "probe: data=$(cat "$FORGE_TRAIN_DATA")"
# One point of A's own curve, with A's own token: what B's point must not join.
curl -s -o /dev/null -X POST -H "X-StarForge-Run-Token: $STARFORGE_TOKEN" \
    -H "Content-Type: application/json" \
    --data '{{"attempt": 1, "steps": [{{"step": 0, "values": {{"loss": 1.5}}}}]}}' \
    "$STARFORGE_ENDPOINT/api/v1/runs/$FORGE_RUN_ID/ingest"
echo "$FORGE_RUN_ID $$" > "$FORGE_OUT_DIR/pid"
while [[ ! -e "{gates}/$FORGE_RUN_ID" ]]; do sleep 0.05; done
echo "probe: intact=$(sha256sum < "$FORGE_EXP_DIR/train.sh" | cut -c1-12)"
echo "victory" > "$FORGE_OUT_DIR/result.txt"
"""
ATTACKER = r"""#!/usr/bin/env bash
set -u
source "$FORGE_EXP_DIR/target.env"
echo "probe: uid=$(id -u) gid=$(id -g)"
try() { if eval "$2" >/dev/null 2>&1; then echo "probe: $1=YES"; else echo "probe: $1=no"; fi; }
try environ "grep -q TOKEN /proc/$VICTIM_PID/environ"
try secret-file "cat $VICTIM_SECRET_FILE"
try package "cat $VICTIM_WORK/experiments/victim/train.sh"
try rewrite "echo 'echo bob says done' > $VICTIM_WORK/experiments/victim/train.sh"
try out "ls $VICTIM_OUT"
try logs "cat $VICTIM_RUN/logs/attempt-1.log"
try kill "kill -9 $VICTIM_PID"
try blobs "ls $FORGE_STORAGE_ROOT/blobs"
try cache "cat $FORGE_STORAGE_ROOT/cache/datasets/alice/private-set/v1/rows.jsonl"
try data-view "cat $VICTIM_DATA"
try hf-cache "touch $FORGE_STORAGE_ROOT/cache/hf/poison"
try uids "ls $FORGE_STORAGE_ROOT/uids"
echo "probe: hf-home=$HF_HOME"
# Ingest into A's run: with any token of A's that B can find (A's environment, A's binding),
# then with B's own job token. Each answer is the HTTP status of one loss=666 point.
post() {
    curl -s -o /dev/null -w '%{http_code}' -X POST -H "X-StarForge-Run-Token: $2" \
        -H "Content-Type: application/json" \
        --data '{"attempt": 1, "steps": [{"step": 1, "values": {"loss": 666}}]}' \
        "$STARFORGE_ENDPOINT/api/v1/runs/$1/ingest"
}
stolen=$(tr '\0' '\n' < "/proc/$VICTIM_PID/environ" 2>/dev/null | sed -n 's/^STARFORGE_TOKEN=//p')
[ -n "$stolen" ] || stolen=$(sed -n 's/.*"job_token": *"\([^"]*\)".*/\1/p' \
    "$VICTIM_RUN"/state/*.binding.json 2>/dev/null)
echo "probe: stolen-token=${stolen:-none}"
echo "probe: ingest-stolen=$(post "$VICTIM_RUN_ID" "${stolen:-none}")"
echo "probe: ingest-own-token=$(post "$VICTIM_RUN_ID" "$STARFORGE_TOKEN")"
"""


@contextmanager
def lab_server(open_root: Path, mp: pytest.MonkeyPatch, **settings: object) -> Iterator[Path]:
    """A root server with the defaults a lab would keep (no job_user, isolation auto), its home
    and storage in ``open_root``, with ``settings`` in its server.yaml."""
    home = open_root / "home"
    home.mkdir()
    wanted = {"storage_root": str(open_root / "st"), **settings}
    (home / "server.yaml").write_text(yaml.safe_dump(wanted))
    mp.setenv("STARFORGE_HOME", str(home))
    for key in ("STARFORGE_SERVER", "STARFORGE_JOB_USER", "STARFORGE_ISOLATION"):
        mp.delenv(key, raising=False)
    assert main(["server", "start"]) == 0
    try:
        yield home
    finally:
        main(["server", "stop"])


@pytest.fixture
def team_server(open_root: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    with lab_server(open_root, monkeypatch) as home:
        yield home


class Member:
    def __init__(self, sf: Callable[..., Result], mp: pytest.MonkeyPatch, token: str) -> None:
        self.sf, self.mp, self.token = sf, mp, token
        info = config.read_server_file()
        assert info is not None
        self.url = str(info["url"])

    def __call__(self, *args: str, cwd: Path | None = None) -> Result:
        self.mp.setenv("STARFORGE_SERVER", self.url)
        self.mp.setenv("STARFORGE_TOKEN", self.token)
        try:
            return self.sf(*args, cwd=cwd)
        finally:
            self.mp.delenv("STARFORGE_SERVER")
            self.mp.delenv("STARFORGE_TOKEN")


def member(sf: Callable[..., Result], mp: pytest.MonkeyPatch, name: str) -> Member:
    got = sf("admin", "user", "add", name, "--role", "member", "--json")
    assert got.code == 0, got.err
    return Member(sf, mp, str(got.json()["token"]))  # type: ignore[index, call-overload]


def job_lab(new_lab: Callable[..., Lab], name: str, script: str, extra: dict[str, str]) -> Lab:
    made = new_lab(f"{name}-lab")
    experiments.new_experiment(made, name, "custom/custom")
    folder = made.root / "experiments" / name
    (folder / "train.sh").write_text(script)
    config_yaml = "starforge:\n  observability: platform\n"
    if name == "victim":
        config_yaml += "secrets:\n  - {name: KEY_PEM, as: file}\n  - {name: HF_TOKEN, as: env}\n"
        config_yaml += "data:\n  train:\n    dataset: alice/private-set@v1\n"
    (folder / "config.yaml").write_text(config_yaml)
    for path, text in extra.items():
        (folder / path).write_text(text)
    commit_all(made.root, f"add {name}")
    return made


def submit(who: Member, lab: Lab, exp: str, *extra: str) -> str:
    args = ["--profile", "h200:1", "--image", IMAGE, "--json", *extra]
    got = who("submit", exp, *args, cwd=lab.root)
    assert got.code == 0, got.err
    return str(got.json()["run_id"])  # type: ignore[index, call-overload]


def ids(probe: str) -> tuple[int, int]:
    """(uid, gid) from ``uid=U gid=G`` (the probe line after its first ``=``)."""
    uid, gid = probe.split()
    return int(uid), int(gid.removeprefix("gid="))


def log_of(who: Member, run_id: str) -> str:
    return who("job", "logs", run_id, "-n", "0", "--no-follow").out


@pytest.mark.integration
@as_root
def test_two_members_jobs_run_under_uids_of_their_own_and_cannot_reach_each_other(
    team_server: Path,
    open_root: Path,
    sf: Callable[..., Result],
    new_lab: Callable[..., Lab],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("STARFORGE_HOME", str(team_server))
    alice, bob = member(sf, monkeypatch, "alice"), member(sf, monkeypatch, "bob")
    pem = tmp_path / "key.pem"
    pem.write_text("alice's private key\n")
    assert alice("secret", "set", "KEY_PEM", "--from-file", str(pem)).code == 0
    hf = tmp_path / "hf"
    hf.write_text("hf_alice_token_3e5f\n")
    assert alice("secret", "set", "HF_TOKEN", "--from-file", str(hf)).code == 0
    gates = open_root / "gates"
    gates.mkdir(mode=0o755)
    rows = tmp_path / "private-set"
    rows.mkdir()
    (rows / "rows.jsonl").write_text('{"row": "alice unreleased"}\n')
    assert alice("dataset", "push", "private-set", "v1", str(rows)).code == 0
    lab = job_lab(new_lab, "victim", VICTIM.format(gates=gates), {})
    victim = submit(alice, lab, "victim", "--train-data", "rows.jsonl")

    def pid_file() -> Path | None:
        found = list((open_root / "st").glob(f"runs/alice/*/victim/{victim}/out/pid"))
        return found[0] if found else None

    wait_for(alice, victim, {"running"})
    wait_until(lambda: pid_file() is not None, "the victim's first line of work")
    out = pid_file()
    assert out is not None
    run_dir = out.parent.parent
    _, pid = out.read_text().split()
    environ = dict(
        entry.split("=", 1)
        for entry in Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0")
        if "=" in entry
    )
    secret_file, a_token = environ["KEY_PEM_FILE"], environ["STARFORGE_TOKEN"]
    target = {
        "VICTIM_PID": pid,
        "VICTIM_RUN_ID": victim,
        "VICTIM_SECRET_FILE": secret_file,
        "VICTIM_RUN": str(run_dir),
        "VICTIM_WORK": str(run_dir / "work"),
        "VICTIM_OUT": str(run_dir / "out"),
        "VICTIM_DATA": str(run_dir / "datasets" / "alice" / "private-set" / "v1" / "rows.jsonl"),
    }
    env = "".join(f"{k}={v}\n" for k, v in target.items())
    attacker = submit(bob, job_lab(new_lab, "attacker", ATTACKER, {"target.env": env}), "attacker")
    assert wait_for(bob, attacker, {"succeeded", "failed"})["status"] == "succeeded"
    attacker_log = log_of(bob, attacker)
    seen = probes(attacker_log)

    (gates / victim).touch()
    view = wait_for(alice, victim, {"succeeded", "failed"})
    victim_log = log_of(alice, victim)
    assert view["status"] == "succeeded", victim_log
    mine = probes(victim_log)
    (a_uid, a_gid), (b_uid, b_gid) = ids(mine["uid"]), ids(seen["uid"])
    assert a_uid != b_uid and all(RANGE[0] <= u <= RANGE[1] for u in (a_uid, b_uid))
    assert a_gid != b_gid  # each member's group
    assert a_token not in attacker_log  # A's job token reached B by no path B tried
    assert {k: v for k, v in seen.items() if k not in {"uid", "hf-home"}} == {
        "environ": "no",
        "secret-file": "no",
        "package": "no",
        "rewrite": "no",
        "out": "no",
        "logs": "no",
        "kill": "no",
        "blobs": "no",
        "cache": "no",
        "data-view": "no",
        "hf-cache": "no",
        "uids": "no",
        "stolen-token": "none",
        "ingest-stolen": "403",  # B found no token of A's: what it sent is not A's run's
        "ingest-own-token": "403",  # B's token is B's run's alone
    }, seen
    assert seen["hf-home"].endswith("/out/.starforge/hf")  # B's own, inside B's run
    expected = VICTIM.format(gates=gates).encode()
    assert mine["intact"] == hashlib.sha256(expected).hexdigest()[:12]
    assert (run_dir / "out" / "result.txt").read_text() == "victory\n"
    # A read its own admitted version, through its own view of the (closed) cache.
    assert mine["data"] == '{"row": "alice unreleased"}'
    assert loss_curve(alice, victim) == [(0, 1.5)]  # A's point, not B's loss=666


def loss_curve(who: Member, run_id: str) -> list[tuple[int, float]]:
    """The (step, value) points of the run's ``loss`` as its owner reads them (`sf job metrics`)."""
    got = who("job", "metrics", run_id, "-k", "loss", "--json")
    assert got.code == 0, got.err
    series = got.json()["series"]  # type: ignore[index, call-overload]
    return [
        (int(step), float(value))
        for found in series
        for step, value in zip(found["steps"], found["values"], strict=True)
    ]


RESUMABLE = """#!/usr/bin/env bash
set -eu
echo "probe: attempt$FORGE_ATTEMPT=$(id -u)"
if [[ "$FORGE_ATTEMPT" == 1 ]]; then
    echo "state of attempt 1" > "$FORGE_OUT_DIR/checkpoint.txt"
    exit 3
fi
echo "probe: found=$(cat "$FORGE_OUT_DIR/checkpoint.txt")"
echo "and attempt 2" >> "$FORGE_OUT_DIR/checkpoint.txt"
"""


@pytest.mark.integration
@as_root
def test_a_retried_run_reads_what_its_earlier_attempt_wrote_under_another_uid(
    team_server: Path,
    open_root: Path,
    sf: Callable[..., Result],
    new_lab: Callable[..., Lab],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("STARFORGE_HOME", str(team_server))
    alice = member(sf, monkeypatch, "alice")
    run_id = submit(alice, job_lab(new_lab, "resumable", RESUMABLE, {}), "resumable")
    assert wait_for(alice, run_id, {"succeeded", "failed"})["status"] == "failed"
    (out,) = (open_root / "st").glob(f"runs/alice/*/resumable/{run_id}/out")
    # Taken back from the attempt's uid: root's, read by the member's group, written by no job.
    assert (out.stat().st_uid, oct(out.stat().st_mode & 0o777)) == (0, "0o750")
    assert (out / "checkpoint.txt").stat().st_uid == 0
    assert alice("job", "retry", run_id, "--json").code == 0
    view = wait_for(alice, run_id, {"succeeded", "failed"}, timeout=120)
    log = log_of(alice, run_id)
    assert view["status"] == "succeeded", log
    found = probes(log)
    assert found["found"] == "state of attempt 1"
    assert all(RANGE[0] <= int(found[f"attempt{n}"]) <= RANGE[1] for n in (1, 2))
    assert (out / "checkpoint.txt").read_text() == "state of attempt 1\nand attempt 2\n"
    assert not list((open_root / "st" / "uids").glob("6*"))  # every uid given back


# A range of two uids: the run holding one while the child starts leaves the child the other, so
# the child cannot run under the uid its parent had. A corner of the default range that no other
# test's job takes (tests/runner/test_uids.py keeps 64100-64113).
LINEAGE_UIDS = (64200, 64201)
PARENT = r"""#!/usr/bin/env bash
set -eu
echo "probe: uid=$(id -u)"
mkdir -p "$FORGE_OUT_DIR/export"
echo '{"model_type": "alice-base"}' > "$FORGE_OUT_DIR/export/config.json"
echo "weights of run 1" > "$FORGE_OUT_DIR/export/weights.bin"
"""
HOLDER = r"""#!/usr/bin/env bash
set -u
echo "probe: uid=$(id -u)"
touch "$FORGE_OUT_DIR/holding"
while [[ ! -e "$FORGE_OUT_DIR/gate" ]]; do sleep 0.05; done
"""
CHILD = r"""#!/usr/bin/env bash
set -u
echo "probe: uid=$(id -u)"
echo "probe: model=$FORGE_MODEL"
echo "probe: config=$(cat "$FORGE_MODEL/config.json")"
echo "probe: weights=$(cat "$FORGE_MODEL/weights.bin")"
parent_out=$(dirname "$FORGE_MODEL")
parent_run=$(dirname "$parent_out")
try() { if eval "$2" >/dev/null 2>&1; then echo "probe: $1=YES"; else echo "probe: $1=no"; fi; }
try rewrite-config "echo '{}' > $FORGE_MODEL/config.json"
try remove-weights "rm -f $FORGE_MODEL/weights.bin"
try plant-export "touch $FORGE_MODEL/planted"
try plant-out "touch $parent_out/planted"
try plant-work "touch $parent_run/work/planted"
try rename-export "mv $FORGE_MODEL $parent_out/moved"
"""


@pytest.fixture
def narrow_server(open_root: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    with lab_server(open_root, monkeypatch, job_uid_range=list(LINEAGE_UIDS)) as home:
        yield home


@pytest.mark.integration
@as_root
def test_a_run_started_from_another_runs_export_reads_it_under_another_uid_and_cannot_change_it(
    narrow_server: Path,
    open_root: Path,
    sf: Callable[..., Result],
    new_lab: Callable[..., Lab],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("STARFORGE_HOME", str(narrow_server))
    alice = member(sf, monkeypatch, "alice")
    parent = submit(alice, job_lab(new_lab, "base", PARENT, {}), "base")
    assert wait_for(alice, parent, {"succeeded", "failed"})["status"] == "succeeded"
    (export,) = (open_root / "st").glob(f"runs/alice/*/base/{parent}/out/export")
    # Taken back when run 1 ended: root's, read by alice's group, written by no job.
    assert {p.stat().st_uid for p in (export, export / "config.json")} == {0}
    # A run of alice's holds a uid while the child starts, so the child takes the other one.
    holder = submit(alice, job_lab(new_lab, "holder", HOLDER, {}), "holder")

    def holders_out() -> list[Path]:
        return list((open_root / "st").glob(f"runs/alice/*/holder/{holder}/out"))

    wait_until(
        lambda: any((out / "holding").exists() for out in holders_out()),
        "the holder's first line of work",
    )
    try:
        child = submit(alice, job_lab(new_lab, "tuned", CHILD, {}), "tuned",
                       "--init-from", f"run/{parent}/export")  # fmt: skip
        view = wait_for(alice, child, {"succeeded", "failed"})
    finally:
        for out in holders_out():
            (out / "gate").touch()
    child_log = log_of(alice, child)
    assert view["status"] == "succeeded", child_log
    assert wait_for(alice, holder, {"succeeded", "failed"})["status"] == "succeeded"
    seen = probes(child_log)
    parent_uid = int(probes(log_of(alice, parent))["uid"])
    assert {parent_uid, int(seen["uid"])} == set(LINEAGE_UIDS)  # two uids, one each
    assert int(probes(log_of(alice, holder))["uid"]) == parent_uid
    assert seen["model"] == str(export)  # the parent's export, resolved at admission
    assert (seen["config"], seen["weights"]) == ('{"model_type": "alice-base"}', "weights of run 1")
    assert {k: v for k, v in seen.items() if k not in {"uid", "model", "config", "weights"}} == {
        "rewrite-config": "no",
        "remove-weights": "no",
        "plant-export": "no",
        "plant-out": "no",
        "plant-work": "no",
        "rename-export": "no",
    }, seen
    assert (export / "config.json").read_text() == '{"model_type": "alice-base"}\n'
    assert (export / "weights.bin").read_text() == "weights of run 1\n"
    assert not list(export.parent.parent.rglob("planted"))
