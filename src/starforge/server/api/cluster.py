"""Resources: the cluster's capacity, the caller's quota and usage, and quotas for admins."""

from __future__ import annotations

from fastapi import APIRouter

from starforge.contract.api import ClusterStatus, MyUsage, QuotaList, QuotaUpdate, UserQuota
from starforge.server.api.deps import RuntimeDep, UserDep
from starforge.server.services import quotas, usage

router = APIRouter()


@router.get("/cluster/status", response_model=ClusterStatus)
def cluster_status(rt: RuntimeDep, user: UserDep) -> ClusterStatus:
    return usage.cluster_status(rt, viewer=user)


@router.get("/usage/mine", response_model=MyUsage)
def my_usage(rt: RuntimeDep, user: UserDep) -> MyUsage:
    return usage.my_usage(rt, user)


@router.get("/admin/quotas", response_model=QuotaList)
def list_quotas(rt: RuntimeDep, user: UserDep) -> QuotaList:
    return usage.list_all(rt, user)


@router.get("/admin/quotas/{name}", response_model=UserQuota)
def get_quota(name: str, rt: RuntimeDep, user: UserDep) -> UserQuota:
    return usage.get(rt, user, name)


@router.put("/admin/quotas/{name}", response_model=UserQuota)
def set_quota(name: str, body: QuotaUpdate, rt: RuntimeDep, user: UserDep) -> UserQuota:
    quotas.set_quota(rt, user, name, body)
    return usage.get(rt, user, name)
