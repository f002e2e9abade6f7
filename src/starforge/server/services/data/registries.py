"""Registry logins: store, list and remove them (admins), and the two places that use one.

Invariants:

- A password is decrypted in two places only: :func:`login_for`, which admission's digest
  resolution calls once a registry has asked for credentials (``server/registry_auth.py``), and
  :func:`for_runner`, the answer to a run's own runner (its run token), for its current attempt
  while it starts or runs, for the registry of the run's own image only. Nothing else returns,
  logs or stores a password.
- Sealed with the secrets' key ring (``services/access/secret_keys``), bound to the host; a key
  rotation re-seals the logins too (:func:`reseal`, called by ``services/access/secrets.rotate``).
- On Slurm a run's runner is its member's Unix account, so a lab's login would be the member's to
  read: :func:`for_runner` withholds it there and says so (the runner's pull goes without it).
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from starforge.contract.images import parse_image
from starforge.contract.registries import (
    RegistryLoginInfo,
    RegistryLoginList,
    RegistryLoginSet,
    RegistryLogout,
    RunRegistryAuth,
    check_registry_host,
)
from starforge.server import registry
from starforge.server.db.models import utcnow
from starforge.server.db.registries import RegistryLogin
from starforge.server.registry_auth import Login
from starforge.server.runtime import Runtime
from starforge.server.services.access import secret_keys
from starforge.server.services.runs import lifecycle

SLURM_WITHHELD = (
    "registry logins are not handed to runners on Slurm (they run as the member's account): "
    "the image is pulled without one"
)


def _aad(host: str) -> str:
    """What a ciphertext is bound to: moved to another host's row, it does not open."""
    return f"registry/{host}"


def _info(row: RegistryLogin) -> RegistryLoginInfo:
    return RegistryLoginInfo(
        host=row.host, username=row.username, set_by=row.set_by, updated_at=row.updated_at
    )


def put(
    rt: Runtime, session: Session, actor: str, host: str, body: RegistryLoginSet
) -> RegistryLoginInfo:
    """Store (or replace) the login of ``host``."""
    host = check_registry_host(host)
    ring = secret_keys.load(rt.settings.server_dir)
    row = session.get(RegistryLogin, host)
    if row is None:
        row = RegistryLogin(host=host, created_at=utcnow())
        session.add(row)
    row.username = body.username
    row.ciphertext, row.key_id = ring.seal(body.password, _aad(host))
    row.set_by, row.updated_at = actor, utcnow()
    session.flush()
    return _info(row)


def listing(session: Session) -> RegistryLoginList:
    """Hosts, usernames and dates; never a password."""
    rows = session.scalars(select(RegistryLogin).order_by(RegistryLogin.host))
    return RegistryLoginList(logins=[_info(row) for row in rows])


def remove(session: Session, host: str) -> RegistryLogout:
    """Remove the login of ``host``; one that is not there is not an error (``removed: false``)."""
    host = check_registry_host(host)
    row = session.get(RegistryLogin, host)
    if row is not None:
        session.delete(row)
    return RegistryLogout(host=host, removed=row is not None)


def _open(rt: Runtime, row: RegistryLogin) -> Login:
    ring = secret_keys.load(rt.settings.server_dir)
    return Login(row.username, ring.open(row.ciphertext, row.key_id, _aad(row.host)))


def login_for(rt: Runtime, host: str) -> Login | None:
    """The stored login of ``host`` (a registry that asked for credentials), or None."""
    with rt.reading() as session:
        row = session.get(RegistryLogin, host.lower())
        return _open(rt, row) if row is not None else None


def for_runner(rt: Runtime, run_id: str, token: str | None, attempt: int) -> RunRegistryAuth:
    """The login of the registry of run ``run_id``'s image, to its runner only, for its current
    attempt while that attempt starts or runs; no login stored: an answer without one."""
    with rt.reading() as session:
        run = lifecycle.starting_attempt(session, run_id, token, attempt, "registry login")
        if not run.image:
            return RunRegistryAuth(registry="")
        host = parse_image(run.image).registry.lower()
        answer = RunRegistryAuth(
            registry=host,
            tls_verify=not registry.plain_http(host, rt.settings.insecure_registries),
        )
        row = session.get(RegistryLogin, host)
        if row is None:
            return answer
        if rt.settings.executor == "slurm":
            return answer.model_copy(update={"withheld": SLURM_WITHHELD})
        login = _open(rt, row)
    return answer.model_copy(update={"username": login.username, "password": login.password})


def reseal(rt: Runtime, ring: secret_keys.KeyRing) -> set[str]:
    """Seal every login under ``ring``'s current key; the key ids still in use. A key rotation
    runs this between :func:`secret_keys.begin_rotation` and :func:`secret_keys.finish_rotation`."""
    with rt.transaction() as session:
        stale = select(RegistryLogin).where(RegistryLogin.key_id != ring.current)
        for row in session.scalars(stale.with_for_update()):
            plain = ring.open(row.ciphertext, row.key_id, _aad(row.host))
            row.ciphertext, row.key_id = ring.seal(plain, _aad(row.host))
    with rt.reading() as session:
        return set(session.scalars(select(RegistryLogin.key_id).distinct()))
