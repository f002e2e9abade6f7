"""Secrets routes: a user's own (and, for admins, the lab's) secrets, the runner's fetch at start,
and the admins' key rotation. No route returns a value except the runner's, which answers only
the run's own runner token (``services/access/secrets.for_runner``)."""

from __future__ import annotations

from fastapi import APIRouter, Response

from starforge.contract.secrets import (
    KeyRotated,
    RunSecrets,
    RunSecretsRequest,
    SecretInfo,
    SecretList,
    SecretRemoved,
    SecretSet,
)
from starforge.server.api.authz import ManageSelf, ReadSelf, RotatesSecretsKey, runner
from starforge.server.api.deps import RuntimeDep, RunToken
from starforge.server.services.access import secrets
from starforge.server.services.runs import lifecycle as run_lifecycle

router = APIRouter()


@router.get("/secrets", response_model=SecretList)
def list_secrets(rt: RuntimeDep, user: ReadSelf) -> SecretList:
    with rt.transaction() as session:
        return secrets.listing(session, user)


@router.post("/secrets", response_model=SecretInfo)
def set_secret(body: SecretSet, rt: RuntimeDep, user: ManageSelf) -> SecretInfo:
    with rt.transaction() as session:
        return secrets.put(rt, session, user, body)


@router.delete("/secrets/{name}", response_model=SecretRemoved)
def remove_secret(name: str, rt: RuntimeDep, user: ManageSelf, lab: bool = False) -> SecretRemoved:
    with rt.transaction() as session:
        return secrets.remove(session, user, name, lab)


@router.post("/admin/secrets/rotate-key", response_model=KeyRotated)
def rotate_key(rt: RuntimeDep, _: RotatesSecretsKey) -> KeyRotated:
    return secrets.rotate(rt)


@router.post(
    "/runs/{run_id}/secrets",
    response_model=RunSecrets,
    dependencies=[runner(run_lifecycle.authorize)],  # the runner's token, checked by the gate
)
def run_secrets(
    run_id: str,
    body: RunSecretsRequest,
    rt: RuntimeDep,
    response: Response,
    token: RunToken = None,
) -> RunSecrets:
    response.headers["Cache-Control"] = "no-store"
    return secrets.for_runner(rt, run_id, token, body.attempt)
