"""Secrets: set, list, remove, check at admission, hand to a starting runner, re-key.

Invariants:

- A value is decrypted in exactly one place, :func:`for_runner`: the answer to the run's own
  runner (its run token), for the current attempt, while the run is ``starting`` or ``running``,
  and only the secrets that run asked for. Nothing else returns, logs or stores a value.
- A user manages their own secrets; only an admin sets or removes lab-wide ones. A user's runs
  may use their own secrets and the lab's (their own of the same name wins); never another user's.
- No secret takes a name the platform sets for the job (``contract.secrets.reserved_why``):
  :func:`put` refuses one, admission refuses a run asking for one (by ``--secret`` or through the
  config, ``as: file`` too), and :func:`for_runner` never hands one out (a run admitted before
  the rule).
- Admission (:func:`admit_secrets`) rejects a run that asks for a secret its user cannot use,
  naming it, before anything is created; it also runs the gated-model preflight with the user's
  ``HF_TOKEN`` (``services/data/hub_preflight``).
- Rotation (:func:`rotate`) never leaves a row that the key ring in force cannot open.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import bindparam, or_, select
from sqlalchemy.orm import Session

from starforge.contract.auth import Role
from starforge.contract.errors import (
    Forbidden,
    InvalidName,
    Rejected,
    UsageError,
)
from starforge.contract.jobspec import JobSpec
from starforge.contract.secrets import (
    HF_TOKEN,
    KeyRotated,
    RunSecrets,
    Scope,
    SecretInfo,
    SecretList,
    SecretRemoved,
    SecretRequest,
    SecretSet,
    SecretValue,
    merge_requests,
    parse_config_secrets,
    reserved_in,
    reserved_list,
    reserved_why,
)
from starforge.server.db.models import utcnow
from starforge.server.db.secrets import Secret
from starforge.server.runtime import Runtime
from starforge.server.services.access import secret_keys
from starforge.server.services.access.users import Caller
from starforge.server.services.data import hub_preflight, registries
from starforge.server.services.labops import notify
from starforge.server.services.runs import lifecycle


def _aad(row: Secret) -> str:
    """What a ciphertext is bound to: moving it to another row makes it unreadable."""
    return f"{row.scope}/{row.owner}/{row.name}"


def _info(row: Secret) -> SecretInfo:
    return SecretInfo.model_validate(row, from_attributes=True)  # the row's own fields


def _scope_of(caller: Caller, lab: bool, verb: str) -> tuple[Scope, str]:
    if not lab:
        return Scope.USER, caller.name
    if not caller.role.at_least(Role.ADMIN):
        raise Forbidden(
            f"only admins may {verb} lab-wide secrets; {caller.name}'s role is {caller.role.value}",
            hint="drop --lab to manage your own secret, or ask an admin",
            details={"role": caller.role.value, "needs": Role.ADMIN.value},
        )
    return Scope.LAB, ""


def _find(session: Session, scope: Scope, owner: str, name: str) -> Secret | None:
    query = select(Secret).where(Secret.scope == scope, Secret.owner == owner, Secret.name == name)
    return session.scalars(query).one_or_none()


# ---- the users' side ------------------------------------------------------------------------


def put(rt: Runtime, session: Session, caller: Caller, body: SecretSet) -> SecretInfo:
    """Set or replace ``body.name`` (the caller's own, or the lab's with ``lab``)."""
    reserved = reserved_why(body.name)
    if reserved is not None:
        raise InvalidName(
            reserved,
            hint=f"choose a name of your own, e.g. MY_{body.name}",
            details={"name": body.name, "reserved": reserved_list()},
        )
    scope, owner = _scope_of(caller, body.lab, "set")
    ring = secret_keys.load(rt.settings.server_dir)
    row = _find(session, scope, owner, body.name)
    if row is None:
        row = Secret(scope=scope.value, owner=owner, name=body.name, set_by=caller.name)
        session.add(row)
    row.ciphertext, row.key_id = ring.seal(body.value, _aad(row))
    row.set_by, row.updated_at = caller.name, utcnow()
    session.flush()
    return _info(row)


def listing(session: Session, caller: Caller) -> SecretList:
    """The caller's own secrets and the lab's: names, scope and dates, never values."""
    query = (
        select(Secret)
        .where(or_(Secret.scope == Scope.LAB, Secret.owner == caller.name))
        .order_by(Secret.scope.desc(), Secret.name)
    )
    return SecretList(secrets=[_info(row) for row in session.scalars(query)])


def remove(session: Session, caller: Caller, name: str, lab: bool) -> SecretRemoved:
    """Remove one secret; removing one that is not there is not an error (``removed: false``)."""
    scope, owner = _scope_of(caller, lab, "remove")
    row = _find(session, scope, owner, name)
    if row is not None:
        session.delete(row)
    return SecretRemoved(name=name, scope=scope, removed=row is not None)


# Built once: every submission asks it (building a statement costs more than running it).
_USABLE = select(Secret).where(
    Secret.name.in_(bindparam("names", expanding=True)),
    or_(
        Secret.scope == Scope.LAB,
        (Secret.scope == Scope.USER) & (Secret.owner == bindparam("user")),
    ),
)


def usable(session: Session, user: str, names: list[str]) -> dict[str, Secret]:
    """The rows ``user``'s runs would use for ``names``: their own, else the lab's."""
    if not names:
        return {}
    rows = session.scalars(_USABLE, {"names": names, "user": user})
    found: dict[str, Secret] = {}
    for row in rows:
        if row.name not in found or row.scope == Scope.USER:
            found[row.name] = row
    return found


def requested(spec: JobSpec, config: dict[str, Any] | None) -> list[SecretRequest]:
    """What a run asks for: the spec's names and its composed config's ``secrets:``."""
    try:
        from_config = parse_config_secrets(config or {})
    except ValueError as exc:
        raise UsageError(f"experiment config: {exc}", details={"key": "secrets"}) from None
    return merge_requests(from_config, list(spec.secrets))


# ---- admission ------------------------------------------------------------------------------


def admit_secrets(rt: Runtime, user: str, spec: JobSpec, config: dict[str, Any]) -> list[str]:
    """Reject a run asking for a secret ``user`` cannot use (naming each), then run the hub
    preflight of its ``--model`` with the user's ``HF_TOKEN``; return warnings."""
    wanted = requested(spec, config)
    reserved = reserved_in(wanted)
    if reserved:
        raise InvalidName(
            f"the run asks for secret(s) named like the platform's variables: "
            f"{', '.join(reserved)} (reserved: {reserved_list()})",
            hint="rename each (`sf secret set MY_NAME`) and ask for the new name",
            details={"reserved_secrets": reserved, "reserved": reserved_list()},
        )
    names = [r.name for r in wanted]
    if hub_preflight.applies(rt.settings, spec):
        names.append(HF_TOKEN)
    if not names:  # most runs: no secret and no hub model, so nothing to read
        return []
    with rt.reading() as session:  # admission reads: it never waits for the writer
        rows = usable(session, user, names)
        missing = [r.name for r in wanted if r.name not in rows]
        hf_token = _open(rt, rows[HF_TOKEN]) if HF_TOKEN in rows else None
    if missing:
        raise Rejected(
            f"the run asks for secret(s) that do not exist for {user}: {', '.join(missing)}",
            hint=" ; ".join(f"`sf secret set {name}`" for name in missing)
            + " (an admin may set a lab-wide one with --lab); `sf secret ls` lists yours",
            details={"missing_secrets": missing},
        )
    return hub_preflight.check(rt.settings, spec, hf_token)


def _open(rt: Runtime, row: Secret) -> str:
    return secret_keys.load(rt.settings.server_dir).open(row.ciphertext, row.key_id, _aad(row))


# ---- the runner's side ----------------------------------------------------------------------


def for_runner(rt: Runtime, run_id: str, token: str | None, attempt: int) -> RunSecrets:
    """The values of the secrets run ``run_id`` asked for, to its runner only (its run token),
    for its current attempt while that attempt starts or runs."""
    with rt.transaction() as session:
        run = lifecycle.starting_attempt(session, run_id, token, attempt, "secrets")
        wanted = requested(JobSpec.read(run.spec), run.config)
        # Never a platform's name, even for a run admitted before admission refused them.
        wanted = [r for r in wanted if reserved_why(r.name, r.mount.value) is None]
        rows = usable(session, run.user, [r.name for r in wanted])
        ring = secret_keys.load(rt.settings.server_dir)
        values = []
        for req in wanted:
            row = rows.get(req.name)
            if row is None:  # removed since admission: the job starts without it, and says so
                continue
            value = ring.open(row.ciphertext, row.key_id, _aad(row))
            values.append(SecretValue(name=req.name, mount=req.mount, value=value))
    return RunSecrets(secrets=values)


# ---- key rotation ---------------------------------------------------------------------------


def rotate(rt: Runtime) -> KeyRotated:
    """Re-encrypt every secret under a new key, with no moment at which a row cannot be opened:
    the ring first holds the new key and the old ones, then each row is re-sealed in its own
    short transaction (the API keeps serving), then the keys no row uses are dropped."""
    server_dir = rt.settings.server_dir
    ring = secret_keys.begin_rotation(server_dir)
    with rt.transaction() as session:
        ids = list(session.scalars(select(Secret.id).where(Secret.key_id != ring.current)))
    for row_id in ids:
        with rt.transaction() as session:
            row = session.get(Secret, row_id, with_for_update=True)
            if row is None or row.key_id == ring.current:
                continue  # removed or re-set meanwhile
            value = ring.open(row.ciphertext, row.key_id, _aad(row))
            row.ciphertext, row.key_id = ring.seal(value, _aad(row))
    with rt.transaction() as session:
        used = set(session.scalars(select(Secret.key_id).distinct()))
    # Webhook signing secrets and registry logins are sealed with the same ring: re-sealed too,
    # so no key one of them still needs is dropped.
    used |= notify.reseal(rt, ring)
    used |= registries.reseal(rt, ring)
    retired = secret_keys.finish_rotation(server_dir, ring, used)
    return KeyRotated(key_id=ring.current, reencrypted=len(ids), retired=retired)
