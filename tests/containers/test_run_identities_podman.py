"""The podman twin of tests/security/test_run_identities.py: two members' jobs inside their image on
a root server with default settings (``containers: podman``), and B's job, knowing everything
about A's run (its host PID, paths, secret file), can neither read, signal nor change it.

A real embedded server as root, storage under /var/tmp, a busybox image pushed to the local
registry (scripts/registry.sh) and pinned by digest at admission. A's job waits on a gate file in
its own out folder while B's job tries each attack from inside its container; then A's job
finishes and its run succeeds intact. Without podman or the registry the test skips, except under
``CI=true``, where it fails.
"""

from __future__ import annotations

import hashlib
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from starforge.project.lab import Lab
from tests.conftest import Result
from tests.containers.conftest import containers_named, make_image
from tests.containers.test_images_registry import registry
from tests.integration.conftest import wait_for
from tests.integration.test_lifecycle import wait_until
from tests.security.test_job_isolation import as_root, open_root, probes
from tests.security.test_run_identities import (
    RANGE,
    Member,
    ids,
    job_lab,
    lab_server,
    log_of,
    loss_curve,
    member,
)

__all__ = ["open_root", "registry"]  # fixtures this module uses

pytestmark = [pytest.mark.containers, pytest.mark.usefixtures("podman")]

VICTIM = r"""#!/usr/bin/env bash
set -u
echo "probe: uid=$(id -u) gid=$(id -g)"
echo "probe: data=$(cat "$FORGE_TRAIN_DATA")"
echo "probe: virtual-gpus=${FORGE_VIRTUAL_GPUS:-unset} cuda=${CUDA_VISIBLE_DEVICES:-unset}"
mkdir -p "$HF_HOME" && touch "$HF_HOME/mine" && echo "probe: hf-write=ok"
# One point of A's own curve, with A's own token: what B's point must not join.
wget -q -O /dev/null --header "X-StarForge-Run-Token: $STARFORGE_TOKEN" \
    --header "Content-Type: application/json" \
    --post-data '{"attempt": 1, "steps": [{"step": 0, "values": {"loss": 1.5}}]}' \
    "$STARFORGE_ENDPOINT/api/v1/runs/$FORGE_RUN_ID/ingest"
echo started > "$FORGE_OUT_DIR/started"
while [ ! -e "$FORGE_OUT_DIR/gate" ]; do sleep 0.05; done
echo "probe: intact=$(sha256sum < "$FORGE_EXP_DIR/train.sh" | cut -c1-12)"
echo "victory" > "$FORGE_OUT_DIR/result.txt"
"""
ATTACKER = r"""#!/usr/bin/env bash
set -u
. "$FORGE_EXP_DIR/target.env"
echo "probe: uid=$(id -u) gid=$(id -g)"
try() { if eval "$2" >/dev/null 2>&1; then echo "probe: $1=YES"; else echo "probe: $1=no"; fi; }
try environ "grep -q TOKEN /proc/$VICTIM_PID/environ"
try any-environ "cat /proc/[0-9]*/environ | grep -q $VICTIM_RUN_ID"
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
echo "probe: caps=$(grep '^CapBnd' /proc/self/status | cut -f2)"
echo "probe: no-new-privs=$(grep '^NoNewPrivs' /proc/self/status | cut -f2)"
root="$FORGE_STORAGE_ROOT"
seen=$(awk -v r="$root/" 'index($2, r) == 1 { split($4, o, ","); print $2 ":" o[1] }' \
    /proc/self/mounts | sort | tr '\n' ' ')
echo "probe: mounts=$seen"
echo "probe: hf-home=$HF_HOME"
# Ingest into A's run: with any token of A's that B can find (A's environment, A's binding),
# then with B's own job token. Each answer is the HTTP status of one loss=666 point (busybox
# wget -S prints the status line).
post() {
    wget -S -q -O /dev/null --header "X-StarForge-Run-Token: $2" \
        --header "Content-Type: application/json" \
        --post-data '{"attempt": 1, "steps": [{"step": 1, "values": {"loss": 666}}]}' \
        "$STARFORGE_ENDPOINT/api/v1/runs/$1/ingest" 2>&1 \
        | sed -n 's/^ *HTTP\/1\.[01] \([0-9]*\).*/\1/p' | tail -n 1
}
stolen=$(tr '\0' '\n' < "/proc/$VICTIM_PID/environ" 2>/dev/null | sed -n 's/^STARFORGE_TOKEN=//p')
[ -n "$stolen" ] || stolen=$(cat "$VICTIM_RUN"/state/*.binding.json 2>/dev/null \
    | sed -n 's/.*"job_token": *"\([^"]*\)".*/\1/p')
echo "probe: stolen-token=${stolen:-none}"
echo "probe: ingest-stolen=$(post "$VICTIM_RUN_ID" "${stolen:-none}")"
echo "probe: ingest-own-token=$(post "$VICTIM_RUN_ID" "$STARFORGE_TOKEN")"
"""


@pytest.fixture
def podman_server(open_root: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A lab's root server (tests/security/test_run_identities.py) that runs jobs in their image
    with podman."""
    monkeypatch.setenv("STARFORGE_CONTAINERS", "podman")  # the suite's default is none
    with lab_server(open_root, monkeypatch, containers="podman") as home:
        yield home


def pushed_image(address: str) -> str:
    """The suite's busybox image in the local registry, pulled by digest (what admission pins
    and the runner starts)."""
    local = make_image({})
    remote = f"{address}/sf-test/identities:{local.rsplit(':', 1)[1]}"
    subprocess.run(["podman", "tag", local, remote], check=True, capture_output=True)
    with tempfile.NamedTemporaryFile() as digest_file:
        subprocess.run(
            ["podman", "push", "--tls-verify=false", "--digestfile", digest_file.name, remote],
            check=True, capture_output=True,
        )  # fmt: skip
        digest = Path(digest_file.name).read_text().strip()
    pinned = f"{remote.rsplit(':', 1)[0]}@{digest}"
    subprocess.run(["podman", "pull", "--tls-verify=false", pinned], check=True,
                   capture_output=True)  # fmt: skip
    return pinned


def submit(who: Member, lab: Lab, exp: str, image: str, *extra: str) -> str:
    args = ["--profile", "h200:1", "--image", image, "--json", *extra]
    got = who("submit", exp, *args, cwd=lab.root)
    assert got.code == 0, got.err
    return str(got.json()["run_id"])  # type: ignore[index, call-overload]


def job_process(run_id: str) -> tuple[int, dict[str, str]]:
    """The host PID and environment of the run's ``train.sh`` (inside its container)."""
    for entry in sorted(Path("/proc").iterdir(), key=lambda p: p.name):
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "environ").read_bytes().decode(errors="replace")
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        env = dict(e.split("=", 1) for e in raw.split("\0") if "=" in e)
        if env.get("FORGE_RUN_ID") == run_id and "train.sh" in cmdline:
            return int(entry.name), env
    raise AssertionError(f"no process of {run_id} runs train.sh")


def cmdlines_holding(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.mark.integration
@as_root
def test_two_members_jobs_in_podman_cannot_reach_each_other(
    podman_server: Path,
    open_root: Path,
    registry: str,
    sf: Callable[..., Result],
    new_lab: Callable[..., Lab],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("STARFORGE_HOME", str(podman_server))  # `sf` set a home of its own
    image = pushed_image(registry)
    alice, bob = member(sf, monkeypatch, "alice"), member(sf, monkeypatch, "bob")
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
    victim = submit(alice, job_lab(new_lab, "victim", VICTIM, {}), "victim", image,
                    "--train-data", "rows.jsonl")  # fmt: skip
    started: list[Path] = []
    try:

        def found() -> bool:
            started[:] = list((open_root / "st").glob(f"runs/alice/*/victim/{victim}/out/started"))
            return bool(started)

        wait_until(found, "the victim's first line of work")
        run_dir = started[0].parent.parent
        pid, env = job_process(victim)
        assert env["HF_TOKEN"].strip() == "hf_alice_token_3e5f"  # what B is after
        # Nobody on the host reads A's job token in podman's command line (ps).
        assert cmdlines_holding(env["STARFORGE_TOKEN"]) == []
        target = {
            "VICTIM_PID": str(pid),  # the host's PID: B's container has no such process
            "VICTIM_RUN_ID": victim,
            "VICTIM_SECRET_FILE": env["KEY_PEM_FILE"],
            "VICTIM_RUN": str(run_dir),
            "VICTIM_WORK": str(run_dir / "work"),
            "VICTIM_OUT": str(run_dir / "out"),
            "VICTIM_DATA": env["FORGE_TRAIN_DATA"],
        }
        assert target["VICTIM_DATA"].startswith(f"{run_dir}/datasets/")  # A's own view
        lines = "".join(f"{k}={v}\n" for k, v in target.items())
        lab = job_lab(new_lab, "attacker", ATTACKER, {"target.env": lines})
        attacker = submit(bob, lab, "attacker", image)
        done = wait_for(bob, attacker, {"succeeded", "failed"})
        attacker_log = log_of(bob, attacker)
        assert done["status"] == "succeeded", attacker_log
        assert env["STARFORGE_TOKEN"] not in attacker_log  # A's token reached B by no path
        assert f"inside the image {image}" in attacker_log
        seen = probes(attacker_log)
    finally:
        for gate in started:
            (gate.parent / "gate").touch()
    view = wait_for(alice, victim, {"succeeded", "failed"})
    victim_log = log_of(alice, victim)
    assert view["status"] == "succeeded", victim_log
    assert f"inside the image {image}" in victim_log
    mine = probes(victim_log)
    (a_uid, a_gid), (b_uid, b_gid) = ids(mine["uid"]), ids(seen["uid"])
    assert a_uid != b_uid and all(RANGE[0] <= u <= RANGE[1] for u in (a_uid, b_uid))
    assert a_gid != b_gid  # each member's group
    attacks = {k: v for k, v in seen.items() if k not in {"uid", "caps", "no-new-privs",
                                                         "mounts", "hf-home"}}  # fmt: skip
    assert attacks == {
        "environ": "no",
        "any-environ": "no",
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
    # B holds no capability and cannot gain one (a setuid program in its image stays B's uid).
    assert (seen["caps"], seen["no-new-privs"]) == ("0000000000000000", "1")
    # The only host folders B's container sees are its own run's work and out, read-write.
    mounts = seen["mounts"].split()
    assert len(mounts) == 2 and all(m.endswith(f"/{attacker}/{d}:rw") for m, d in
                                    zip(mounts, ["out", "work"], strict=True)), mounts  # fmt: skip
    assert seen["hf-home"].endswith(f"/{attacker}/out/.starforge/hf")  # B's own
    assert mine["hf-write"] == "ok"  # A's own cache is A's to write
    # The h200:1 profile on this GPU-less host: no CDI device asked of podman, the job told so.
    assert mine["virtual-gpus"] == "1 cuda=unset", victim_log
    assert "the node's GPUs [0] are the virtual inventory's" in victim_log
    assert mine["intact"] == hashlib.sha256(VICTIM.encode()).hexdigest()[:12]
    assert (run_dir / "out" / "result.txt").read_text() == "victory\n"
    assert mine["data"] == '{"row": "alice unreleased"}'
    assert loss_curve(alice, victim) == [(0, 1.5)]  # A's point, not B's loss=666
    for run_id in (victim, attacker):
        assert containers_named(f"sf-{run_id}-1-0") == []
