"""The secrets endpoints, over the one HTTP client (:class:`starforge.client.http.Client`).

The CLI's calls (set, list, remove, rotate the key) and the runner's one call that receives
values (:func:`for_run`, with the run token the client was built with)."""

from __future__ import annotations

from urllib.parse import quote

from starforge.client.http import Client
from starforge.contract.secrets import (
    KeyRotated,
    RunSecrets,
    RunSecretsRequest,
    SecretInfo,
    SecretList,
    SecretRemoved,
    SecretSet,
)


def set_secret(client: Client, name: str, value: str, *, lab: bool = False) -> SecretInfo:
    return client._post("/secrets", SecretInfo, SecretSet(name=name, value=value, lab=lab))


def list_secrets(client: Client) -> SecretList:
    return client._get("/secrets", SecretList)


def remove_secret(client: Client, name: str, *, lab: bool = False) -> SecretRemoved:
    response = client._send(
        "DELETE", f"/secrets/{quote(name, safe='')}", params={"lab": "true" if lab else "false"}
    )
    return SecretRemoved.read(response.content)


def rotate_key(client: Client) -> KeyRotated:
    return client._post("/admin/secrets/rotate-key", KeyRotated)


def for_run(client: Client, run_id: str, attempt: int, node_rank: int = 0) -> RunSecrets:
    body = RunSecretsRequest(attempt=attempt, node_rank=node_rank)
    return client._post(f"/runs/{quote(run_id, safe='')}/secrets", RunSecrets, body)
