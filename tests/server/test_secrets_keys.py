"""Secrets at rest: sealed with the server's key (a 0600 file, or the environment), bound to their
row, and re-keyed by rotation without a moment at which a secret cannot be opened."""

from __future__ import annotations

import base64
import json
import os
import stat

import pytest
from sqlalchemy import select

from starforge.contract.auth import Role
from starforge.contract.errors import ServerError
from starforge.contract.secrets import SecretRequest, SecretSet
from starforge.server.db.models import Run
from starforge.server.db.secrets import Secret
from starforge.server.runtime import Runtime
from starforge.server.services.access import secret_keys, secrets
from starforge.server.services.access.users import Caller

from .factories import binding, schedule, submit

ALICE = Caller("alice", Role.MEMBER)
BOB = Caller("bob", Role.MEMBER)


def put(rt: Runtime, caller: Caller, name: str, value: str) -> None:
    with rt.transaction() as session:
        secrets.put(rt, session, caller, SecretSet(name=name, value=value))


def rows(rt: Runtime) -> list[Secret]:
    with rt.transaction() as session:
        found = list(session.scalars(select(Secret).order_by(Secret.id)))
        session.expunge_all()
        return found


def values_for_run(rt: Runtime, run_id: str) -> dict[str, str]:
    token = binding(rt, run_id)["run_token"]
    return {s.name: s.value for s in secrets.for_runner(rt, run_id, token, 1).secrets}


def started_run_asking(rt: Runtime, *names: str) -> str:
    run_id = submit(rt, "alice").run_id
    with rt.transaction() as session:  # as if the spec had asked (the API tests submit so)
        run = session.get(Run, run_id)
        assert run is not None
        run.spec = {**run.spec, "secrets": [SecretRequest(name=n).model_dump() for n in names]}
    assert run_id in schedule(rt)
    return run_id


def test_the_key_file_is_created_0600_and_the_database_holds_only_ciphertext(
    rt: Runtime,
) -> None:
    put(rt, ALICE, "HF_TOKEN", "hf_value-at-rest-123")
    path = secret_keys.key_path(rt.settings.server_dir)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    (row,) = rows(rt)
    assert "hf_value-at-rest-123" not in row.ciphertext
    assert b"hf_value-at-rest-123" not in base64.b64decode(row.ciphertext)
    assert row.key_id == json.loads(path.read_text())["current"]


def test_a_ciphertext_copied_onto_another_users_row_does_not_open(rt: Runtime) -> None:
    put(rt, ALICE, "HF_TOKEN", "alices-value-123")
    put(rt, BOB, "HF_TOKEN", "bobs-value-456")
    with rt.transaction() as session:
        alice, bob = session.scalars(select(Secret).order_by(Secret.id)).all()
        bob.ciphertext, bob.key_id = alice.ciphertext, alice.key_id
    ring = secret_keys.load(rt.settings.server_dir)
    bob_row = rows(rt)[1]
    with pytest.raises(ServerError, match="does not open"):
        ring.open(bob_row.ciphertext, bob_row.key_id, "user/bob/HF_TOKEN")


def test_secrets_set_before_a_rotation_still_reach_runs_after_it(rt: Runtime) -> None:
    put(rt, ALICE, "HF_TOKEN", "value-before-rotation")
    old = rows(rt)[0].key_id
    done = secrets.rotate(rt)
    assert done.reencrypted == 1 and done.key_id != old and done.retired == [old]
    assert {r.key_id for r in rows(rt)} == {done.key_id}
    keys = json.loads(secret_keys.key_path(rt.settings.server_dir).read_text())["keys"]
    assert list(keys) == [done.key_id]  # the old key is gone from the file
    run_id = started_run_asking(rt, "HF_TOKEN")
    assert values_for_run(rt, run_id) == {"HF_TOKEN": "value-before-rotation"}


def test_during_a_rotation_every_secret_opens_with_the_ring_in_force(rt: Runtime) -> None:
    put(rt, ALICE, "A_KEY", "sealed-with-the-old-key")
    ring = secret_keys.begin_rotation(rt.settings.server_dir)  # step one: new key, old kept
    (row,) = rows(rt)
    assert row.key_id != ring.current
    fresh = secret_keys.load(rt.settings.server_dir)  # another API process reads the file now
    assert fresh.open(row.ciphertext, row.key_id, "user/alice/A_KEY") == "sealed-with-the-old-key"
    put(rt, ALICE, "B_KEY", "sealed-with-the-new-key")  # a write meanwhile uses the new key
    assert rows(rt)[1].key_id == ring.current


def test_a_key_from_the_environment_is_used_and_rotated_by_putting_a_new_one_first(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = base64.b64encode(os.urandom(32)).decode()
    new = base64.b64encode(os.urandom(32)).decode()
    monkeypatch.setenv(secret_keys.ENV_KEY, old)
    put(rt, ALICE, "HF_TOKEN", "env-sealed-value")
    assert not secret_keys.key_path(rt.settings.server_dir).exists()
    monkeypatch.setenv(secret_keys.ENV_KEY, f"{new},{old}")
    done = secrets.rotate(rt)
    assert done.reencrypted == 1 and done.retired == []
    monkeypatch.setenv(secret_keys.ENV_KEY, new)  # the operator drops the old key
    run_id = started_run_asking(rt, "HF_TOKEN")
    assert values_for_run(rt, run_id) == {"HF_TOKEN": "env-sealed-value"}
