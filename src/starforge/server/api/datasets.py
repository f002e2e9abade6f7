"""Dataset routes: push (commit) a version, list, show, visibility. Thin: see
services/data/datasets."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from starforge.contract.datasets import (
    DatasetList,
    DatasetPush,
    DatasetPushResult,
    DatasetVersionView,
    VisibilityUpdate,
)
from starforge.server.api.authz import Reader, Submitter
from starforge.server.api.bodies import body_doc, json_body
from starforge.server.api.deps import RuntimeDep
from starforge.server.services.data import datasets

router = APIRouter()


@router.post("/datasets", response_model=DatasetPushResult, openapi_extra=body_doc(DatasetPush))
def push(
    body: Annotated[DatasetPush, json_body(DatasetPush)], rt: RuntimeDep, user: Submitter
) -> JSONResponse:
    result = datasets.push(rt, user.name, body)
    return JSONResponse(result.model_dump(mode="json"), status_code=201 if result.created else 200)


@router.get("/datasets", response_model=DatasetList)
def list_datasets(rt: RuntimeDep, user: Reader, ref: str | None = None) -> DatasetList:
    return datasets.list_versions(rt, user.name, ref)


@router.get("/datasets/{owner}/{dataset}/{version}", response_model=DatasetVersionView)
def show(
    owner: str, dataset: str, version: str, rt: RuntimeDep, user: Reader
) -> DatasetVersionView:
    return datasets.show(rt, user.name, f"{owner}/{dataset}@{version}")


@router.put("/datasets/{owner}/{dataset}/visibility", response_model=DatasetList)
def visibility(
    owner: str, dataset: str, body: VisibilityUpdate, rt: RuntimeDep, user: Submitter
) -> DatasetList:
    return datasets.set_visibility(rt, user.name, owner, dataset, body.public)
