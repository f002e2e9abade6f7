"""Resources: the cluster's capacity, the caller's quota and usage, and quotas for admins."""

from __future__ import annotations

from fastapi import APIRouter

from starforge.contract.api import ClusterStatus, MyUsage, QuotaList, QuotaUpdate, UserQuota
from starforge.server.api.authz import ListsQuotas, Reader, ReadSelf, ReadsQuota, SetsQuota
from starforge.server.api.deps import RuntimeDep
from starforge.server.services.scheduling import quotas, usage

router = APIRouter()


@router.get("/cluster/status", response_model=ClusterStatus)
def cluster_status(rt: RuntimeDep, user: Reader) -> ClusterStatus:
    return usage.cluster_status(rt, viewer=user)


@router.get("/usage/mine", response_model=MyUsage)
def my_usage(rt: RuntimeDep, user: ReadSelf) -> MyUsage:
    return usage.my_usage(rt, user.name)


@router.get("/admin/quotas", response_model=QuotaList)
def list_quotas(rt: RuntimeDep, _: ListsQuotas) -> QuotaList:
    return usage.list_all(rt)


@router.get("/admin/quotas/{name}", response_model=UserQuota)
def get_quota(name: str, rt: RuntimeDep, _: ReadsQuota) -> UserQuota:
    return usage.get(rt, name)


@router.put("/admin/quotas/{name}", response_model=UserQuota)
def set_quota(name: str, body: QuotaUpdate, rt: RuntimeDep, user: SetsQuota) -> UserQuota:
    quotas.set_quota(rt, user.name, name, body)
    return usage.get(rt, name)
