"""Running a lab: GPU-hour usage and the daily quota, maintenance drain, webhook endpoints."""

from __future__ import annotations

from datetime import date
from typing import Annotated

from fastapi import APIRouter

from starforge.contract.auth import Role
from starforge.contract.labops import (
    DailyQuotaUpdate,
    DeliveryLog,
    DrainRequest,
    EndpointCreate,
    EndpointCreated,
    EndpointList,
    EndpointRemoved,
    MaintenanceStatus,
    MyGpuHours,
    UsageReport,
)
from starforge.server.api.authz import (
    Drains,
    EndsMaintenance,
    ManageSelf,
    On,
    ReadSelf,
    ReadsMaintenance,
    ReadsUsageReport,
    Rule,
    SetsDailyQuota,
    Who,
    authorize,
)
from starforge.server.api.deps import RuntimeDep
from starforge.server.services.access.users import Caller
from starforge.server.services.labops import maintenance, notify
from starforge.server.services.scheduling import accounting

router = APIRouter()

# A webhook makes the server send requests: members and up only (a viewer only reads), each to
# their own endpoints. Declared here like the rules of ``api/authz``, and walked with them.
ADD_WEBHOOK = Rule("add-webhooks", Who.USER, Role.MEMBER, On.SELF)
WebhookAdder = Annotated[Caller, authorize(ADD_WEBHOOK)]


@router.get("/usage/gpu-hours", response_model=MyGpuHours)
def my_gpu_hours(rt: RuntimeDep, user: ReadSelf) -> MyGpuHours:
    return accounting.mine(rt, user.name)


@router.get("/admin/usage", response_model=UsageReport)
def usage_report(
    rt: RuntimeDep, _: ReadsUsageReport, by: str = "day", since: date | None = None
) -> UsageReport:
    return accounting.report(rt, by, since)


@router.put("/admin/usage/quotas/{name}", response_model=MyGpuHours)
def set_daily_quota(
    name: str, body: DailyQuotaUpdate, rt: RuntimeDep, user: SetsDailyQuota
) -> MyGpuHours:
    return accounting.set_daily_quota(rt, user.name, name, body.gpu_hours)


@router.get("/admin/maintenance", response_model=MaintenanceStatus)
def maintenance_status(rt: RuntimeDep, _: ReadsMaintenance) -> MaintenanceStatus:
    return maintenance.status(rt)


@router.post("/admin/maintenance/drain", response_model=MaintenanceStatus)
def drain(body: DrainRequest, rt: RuntimeDep, user: Drains) -> MaintenanceStatus:
    return maintenance.drain(rt, user, body.note)


@router.post("/admin/maintenance/resume", response_model=MaintenanceStatus)
def resume(rt: RuntimeDep, user: EndsMaintenance) -> MaintenanceStatus:
    return maintenance.resume(rt, user)


@router.get("/notify/endpoints", response_model=EndpointList)
def list_endpoints(rt: RuntimeDep, user: ManageSelf) -> EndpointList:
    return notify.list_mine(rt, user.name)


@router.post("/notify/endpoints", response_model=EndpointCreated)
def add_endpoint(body: EndpointCreate, rt: RuntimeDep, user: WebhookAdder) -> EndpointCreated:
    return notify.add(rt, user.name, body)


@router.delete("/notify/endpoints/{ref}", response_model=EndpointRemoved)
def remove_endpoint(ref: str, rt: RuntimeDep, user: ManageSelf) -> EndpointRemoved:
    return notify.remove(rt, user.name, ref)


@router.get("/notify/deliveries", response_model=DeliveryLog)
def deliveries(
    rt: RuntimeDep, user: ManageSelf, endpoint: str | None = None, limit: int = 100
) -> DeliveryLog:
    return notify.delivery_log(rt, user.name, endpoint, limit)
