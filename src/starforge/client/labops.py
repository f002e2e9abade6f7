"""Calls of the lab-operations endpoints (usage, maintenance, webhooks), one function each.

They ride on :class:`starforge.client.http.Client`'s plumbing (its error mapping and lenient
reads), kept in their own module so the client's core stays small.
"""

from __future__ import annotations

from datetime import date

from starforge.client.http import Client
from starforge.contract import labops


def my_gpu_hours(client: Client) -> labops.MyGpuHours:
    return client._get("/usage/gpu-hours", labops.MyGpuHours)


def usage_report(client: Client, by: str = "day", since: date | None = None) -> labops.UsageReport:
    return client._get(
        "/admin/usage", labops.UsageReport, by=by, since=since.isoformat() if since else None
    )


def set_daily_quota(client: Client, user: str, gpu_hours: float | None) -> labops.MyGpuHours:
    body = labops.DailyQuotaUpdate(gpu_hours=gpu_hours).model_dump(mode="json")
    sent = client._send("PUT", f"/admin/usage/quotas/{user}", json=body)
    return labops.MyGpuHours.read(sent.content)


def maintenance_status(client: Client) -> labops.MaintenanceStatus:
    return client._get("/admin/maintenance", labops.MaintenanceStatus)


def drain(client: Client, note: str = "") -> labops.MaintenanceStatus:
    body = labops.DrainRequest(note=note)
    return client._post("/admin/maintenance/drain", labops.MaintenanceStatus, body)


def end_maintenance(client: Client) -> labops.MaintenanceStatus:
    return client._post("/admin/maintenance/resume", labops.MaintenanceStatus)


def endpoints(client: Client) -> labops.EndpointList:
    return client._get("/notify/endpoints", labops.EndpointList)


def add_endpoint(
    client: Client, url: str, events: list[str] | None = None, project: str | None = None
) -> labops.EndpointCreated:
    fields: dict[str, object] = {"url": url, "project": project}
    if events:
        fields["events"] = events
    body = labops.EndpointCreate.model_validate(fields)
    return client._post("/notify/endpoints", labops.EndpointCreated, body)


def remove_endpoint(client: Client, endpoint_id: str) -> labops.EndpointRemoved:
    sent = client._send("DELETE", f"/notify/endpoints/{endpoint_id}")
    return labops.EndpointRemoved.read(sent.content)


def deliveries(client: Client, endpoint: str | None = None, limit: int = 100) -> labops.DeliveryLog:
    return client._get("/notify/deliveries", labops.DeliveryLog, endpoint=endpoint, limit=limit)
