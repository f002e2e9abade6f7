"""The dataset endpoints, one call each (see ``server/api/datasets.py``)."""

from __future__ import annotations

from urllib.parse import quote

from starforge.client.http import Client
from starforge.contract.datasets import (
    DatasetList,
    DatasetPush,
    DatasetPushResult,
    DatasetRef,
    DatasetVersionView,
    VisibilityUpdate,
)


def push(client: Client, body: DatasetPush) -> DatasetPushResult:
    resp = client._send("POST", "/datasets", json=body.model_dump(mode="json"))
    return DatasetPushResult.read(resp.content)


def list_versions(client: Client, ref: str | None = None) -> DatasetList:
    params = {"ref": ref} if ref else {}
    return DatasetList.read(client._send("GET", "/datasets", params=params).content)


def show(client: Client, ref: DatasetRef) -> DatasetVersionView:
    path = "/".join(quote(p, safe="") for p in (ref.owner, ref.name, ref.version))
    return DatasetVersionView.read(client._send("GET", f"/datasets/{path}").content)


def set_visibility(client: Client, owner: str, name: str, public: bool) -> DatasetList:
    path = f"/datasets/{quote(owner, safe='')}/{quote(name, safe='')}/visibility"
    body = VisibilityUpdate(public=public).model_dump(mode="json")
    return DatasetList.read(client._send("PUT", path, json=body).content)
