"""The registry-login endpoints, over the one HTTP client (:class:`starforge.client.http.Client`).

The admins' calls (store, list, remove a login) and the runner's one call that receives a
password (:func:`for_run`, with the run token the client was built with)."""

from __future__ import annotations

from urllib.parse import quote

from starforge.client.http import Client
from starforge.contract.registries import (
    RegistryLoginInfo,
    RegistryLoginList,
    RegistryLoginSet,
    RegistryLogout,
    RunRegistryAuth,
    RunRegistryAuthRequest,
)


def _path(host: str) -> str:
    return f"/admin/registry-logins/{quote(host, safe='')}"


def login(client: Client, host: str, username: str, password: str) -> RegistryLoginInfo:
    body = RegistryLoginSet(username=username, password=password).model_dump(mode="json")
    return RegistryLoginInfo.read(client._send("PUT", _path(host), json=body).content)


def logins(client: Client) -> RegistryLoginList:
    return client._get("/admin/registry-logins", RegistryLoginList)


def logout(client: Client, host: str) -> RegistryLogout:
    return RegistryLogout.read(client._send("DELETE", _path(host)).content)


def for_run(client: Client, run_id: str, attempt: int, node_rank: int = 0) -> RunRegistryAuth:
    body = RunRegistryAuthRequest(attempt=attempt, node_rank=node_rank)
    return client._post(f"/runs/{quote(run_id, safe='')}/registry-auth", RunRegistryAuth, body)
