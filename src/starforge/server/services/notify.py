"""Webhook notifications: endpoints, the outbox, signing and delivery with backoff.

* A user's endpoint follows the terminal statuses it names (``succeeded``, ``failed``,
  ``stopped``) of their own runs, optionally of one project. Its HMAC secret is made here, shown
  once (:class:`EndpointCreated`) and kept only to sign; no other view carries it.
* :func:`enqueue` is called by :func:`starforge.server.statemachine.transition` for every
  terminal status, in the caller's transaction: the payloads owed are committed together with
  the status change or not at all (an outbox), so none is lost when the server dies.
* :func:`deliver_due` (the leader's notify loop, ``loops/notify``) POSTs each due payload and logs
  each try; a failure is retried after ``notify_backoff_s`` × 2^(tries−1), at most
  ``notify_backoff_max_s``, until ``notify_max_tries``. Delivery is at least once: a server that
  dies between a POST and its log sends it again, with the same ``X-StarForge-Delivery`` id.
* Signature: ``X-StarForge-Signature: sha256=HEX`` where HEX is HMAC-SHA256(secret,
  ``f"{timestamp}.{body}"``) and ``X-StarForge-Timestamp`` is the unix time of the try, so a
  receiver that checks the signature and refuses old timestamps refuses replays.
* SSRF stance: only ``http``/``https`` URLs, no credentials in them, redirects never followed.
  Loopback, private, link-local and other non-public addresses are refused (when the endpoint is
  added and again at every try, after DNS) unless ``notify_allow_private`` allows them; unset,
  only the embedded server allows them (it is local to its one user, who owns that machine).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import secrets
import socket
import time
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import httpx
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from starforge import __version__
from starforge.contract.errors import NotFound, UsageError
from starforge.contract.labops import (
    DELIVERY_HEADER,
    EVENT_HEADER,
    NOTIFY_EVENTS,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    DeliveryLog,
    DeliveryView,
    EndpointCreate,
    EndpointCreated,
    EndpointList,
    EndpointRemoved,
    EndpointView,
)
from starforge.server.db.labops import NotifyDelivery, NotifyEndpoint, NotifyOutbox
from starforge.server.db.models import Run, utcnow
from starforge.server.runtime import Runtime
from starforge.server.settings import Settings

BATCH = 50  # payloads per pass of the loop


# ---- URLs and signatures ------------------------------------------------------------------------


def allows_private(settings: Settings) -> bool:
    if settings.notify_allow_private is not None:
        return settings.notify_allow_private
    return settings.embedded


def _public(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


def check_url(url: str, allow_private: bool, *, resolve: bool = True) -> str:
    """``url`` if a webhook may be sent there, else :class:`UsageError` saying why."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https"):
        raise UsageError(
            f"webhook URL {url!r}: only http:// and https:// URLs are allowed",
            hint="e.g. https://hooks.example.com/starforge",
        )
    if not parts.hostname:
        raise UsageError(f"webhook URL {url!r} names no host")
    if parts.username or parts.password:
        raise UsageError(
            f"webhook URL {url!r} carries credentials",
            hint="the payload is signed: check the X-StarForge-Signature header instead",
        )
    try:
        _ = parts.port
    except ValueError:
        raise UsageError(f"webhook URL {url!r} has an invalid port") from None
    if allow_private or not resolve:
        return url.strip()
    for address in _addresses(parts.hostname):
        if not _public(address):
            raise UsageError(
                f"webhook URL {url!r} reaches a non-public address ({address})",
                hint="an admin may allow private addresses (notify_allow_private: true)",
                details={"address": address},
            )
    return url.strip()


def _addresses(host: str) -> list[str]:
    try:
        return [str(ipaddress.ip_address(host.strip("[]")))]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError as exc:
        raise UsageError(f"webhook host {host!r} does not resolve: {exc}") from None
    return sorted({str(info[4][0]) for info in infos})


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The ``X-StarForge-Signature`` value of ``body`` sent at ``timestamp``."""
    message = str(timestamp).encode() + b"." + body
    return "sha256=" + hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def _events(events: list[str]) -> list[str]:
    chosen = sorted({e.strip() for e in events if e.strip()})
    unknown = [e for e in chosen if e not in NOTIFY_EVENTS]
    if unknown or not chosen:
        raise UsageError(
            f"unknown notification event(s): {', '.join(unknown) or '(none given)'}",
            hint=f"choose among {', '.join(NOTIFY_EVENTS)}",
        )
    return chosen


# ---- endpoints ----------------------------------------------------------------------------------


def _view(session: Session, ep: NotifyEndpoint) -> dict[str, Any]:
    delivered = session.scalar(
        select(func.count()).where(
            NotifyOutbox.endpoint_id == ep.id, NotifyOutbox.delivered_at.is_not(None)
        )
    )
    failing = session.scalar(
        select(func.count()).where(
            NotifyOutbox.endpoint_id == ep.id,
            NotifyOutbox.delivered_at.is_(None),
            NotifyOutbox.tries > 0,
        )
    )
    return {
        "id": ep.id,
        "url": ep.url,
        "events": list(ep.events),
        "project": ep.project,
        "created_at": ep.created_at,
        "delivered": int(delivered or 0),
        "failing": int(failing or 0),
    }


def add(rt: Runtime, user: str, body: EndpointCreate) -> EndpointCreated:
    """Register a webhook of ``user``; the answer carries its secret, the only time it does."""
    url = check_url(body.url, allows_private(rt.settings))
    endpoint = NotifyEndpoint(
        id="wh-" + secrets.token_hex(6),
        user=str(user),
        url=url,
        events=_events(body.events),
        project=body.project or None,
        secret=secrets.token_urlsafe(32),
        created_at=utcnow(),
    )
    with rt.transaction() as session:
        session.add(endpoint)
        session.flush()
        return EndpointCreated(**_view(session, endpoint), secret=endpoint.secret)


def list_mine(rt: Runtime, user: str) -> EndpointList:
    with rt.transaction() as session:
        rows = session.scalars(
            select(NotifyEndpoint)
            .where(NotifyEndpoint.user == str(user))
            .order_by(NotifyEndpoint.created_at, NotifyEndpoint.id)
        ).all()
        return EndpointList(endpoints=[EndpointView(**_view(session, ep)) for ep in rows])


def remove(rt: Runtime, user: str, endpoint_id: str) -> EndpointRemoved:
    """Remove one of the caller's endpoints (and what it was still owed); absent: removed=False."""
    with rt.transaction() as session:
        ep = session.get(NotifyEndpoint, endpoint_id)
        if ep is None or ep.user != str(user):
            return EndpointRemoved(id=endpoint_id, removed=False)
        session.query(NotifyDelivery).filter(NotifyDelivery.endpoint_id == ep.id).delete()
        session.query(NotifyOutbox).filter(NotifyOutbox.endpoint_id == ep.id).delete()
        session.delete(ep)
    return EndpointRemoved(id=endpoint_id, removed=True)


def delivery_log(
    rt: Runtime, user: str, endpoint_id: str | None = None, limit: int = 100
) -> DeliveryLog:
    """The latest tries to the caller's endpoints (or one of them), newest first."""
    with rt.transaction() as session:
        mine = select(NotifyEndpoint.id).where(NotifyEndpoint.user == str(user))
        if endpoint_id is not None:
            if session.scalar(mine.where(NotifyEndpoint.id == endpoint_id)) is None:
                raise NotFound(
                    f"no webhook {endpoint_id} of yours", hint="`sf notify ls` lists them"
                )
            mine = mine.where(NotifyEndpoint.id == endpoint_id)
        rows = session.execute(
            select(NotifyDelivery, NotifyOutbox.run_id, NotifyOutbox.event)
            .join(NotifyOutbox, NotifyOutbox.id == NotifyDelivery.outbox_id)
            .where(NotifyDelivery.endpoint_id.in_(mine))
            .order_by(NotifyDelivery.id.desc())
            .limit(max(1, min(limit, 1000)))
        ).all()
        return DeliveryLog(
            deliveries=[
                DeliveryView(
                    endpoint_id=d.endpoint_id,
                    outbox_id=d.outbox_id,
                    run_id=run_id,
                    event=event,
                    at=d.at,
                    ok=d.ok,
                    status_code=d.status_code,
                    error=d.error,
                )
                for d, run_id, event in rows
            ]
        )


# ---- the outbox ---------------------------------------------------------------------------------


def payload(run: Run, at: datetime) -> dict[str, Any]:
    return {
        "event": f"run.{run.status}",
        "run_id": run.id,
        "user": run.user,
        "project": run.project,
        "experiment": run.experiment,
        "method": run.method,
        "status": run.status,
        "end_reason": run.end_reason,
        "exit_code": run.exit_code,
        "attempt": run.current_attempt,
        "at": at.isoformat(),
    }


def enqueue(session: Session, run: Run, at: datetime) -> None:
    """Owe every endpoint that follows this run's new (terminal) status its payload, in the
    caller's transaction (the status change's)."""
    endpoints = session.scalars(select(NotifyEndpoint).where(NotifyEndpoint.user == run.user)).all()
    for ep in endpoints:
        if run.status not in ep.events or (ep.project and ep.project != run.project):
            continue
        session.add(
            NotifyOutbox(
                endpoint_id=ep.id,
                run_id=run.id,
                event=run.status,
                payload=payload(run, at),
                created_at=at,
                next_at=at,
            )
        )


def backoff_s(settings: Settings, tries: int) -> float:
    """Wait before try ``tries + 1`` after ``tries`` failed ones."""
    return min(settings.notify_backoff_s * 2 ** max(tries - 1, 0), settings.notify_backoff_max_s)


def _post(rt: Runtime, url: str, secret: str, outbox_id: int, event: str, data: Any) -> int:
    """POST one signed payload; its HTTP status (raises on a refused address or transport)."""
    check_url(url, allows_private(rt.settings))  # again: DNS may have changed since it was added
    body = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    ts = int(time.time())
    headers = {
        "Content-Type": "application/json",
        "User-Agent": f"StarForge/{__version__}",
        SIGNATURE_HEADER: sign(secret, ts, body),
        TIMESTAMP_HEADER: str(ts),
        DELIVERY_HEADER: str(outbox_id),
        EVENT_HEADER: f"run.{event}",
    }
    timeout = rt.settings.notify_timeout_s
    response = httpx.post(url, content=body, headers=headers, timeout=timeout)
    return response.status_code


def deliver_due(rt: Runtime) -> int:
    """Try every payload that is due; returns how many were delivered."""
    now = utcnow()
    with rt.transaction() as session:
        due = session.execute(
            select(NotifyOutbox, NotifyEndpoint.url, NotifyEndpoint.secret)
            .join(NotifyEndpoint, NotifyEndpoint.id == NotifyOutbox.endpoint_id)
            .where(
                NotifyOutbox.delivered_at.is_(None),
                NotifyOutbox.gave_up_at.is_(None),
                NotifyOutbox.next_at <= now,
            )
            .order_by(NotifyOutbox.next_at, NotifyOutbox.id)
            .limit(BATCH)
        ).all()
        jobs = [(o.id, o.endpoint_id, o.event, o.payload, url, s) for o, url, s in due]
    delivered = 0
    for outbox_id, endpoint_id, event, data, url, secret in jobs:
        code: int | None = None
        error = ""
        try:
            code = _post(rt, url, secret, outbox_id, event, data)
            if not 200 <= code < 300:
                error = f"HTTP {code}"
        except (httpx.HTTPError, UsageError, OSError) as exc:
            error = f"{type(exc).__name__}: {exc}"[:500]
        delivered += _record(rt, outbox_id, endpoint_id, code, error)
    return delivered


def _record(rt: Runtime, outbox_id: int, endpoint_id: str, code: int | None, error: str) -> int:
    now = utcnow()
    with rt.transaction() as session:
        row = session.get(NotifyOutbox, outbox_id)
        if row is None:  # its endpoint was removed meanwhile
            return 0
        row.tries += 1
        ok = not error
        session.add(
            NotifyDelivery(
                outbox_id=outbox_id,
                endpoint_id=endpoint_id,
                at=now,
                status_code=code,
                ok=ok,
                error=error,
            )
        )
        if ok:
            row.delivered_at = now
        elif row.tries >= rt.settings.notify_max_tries:
            row.gave_up_at = now
        else:
            row.next_at = now + timedelta(seconds=backoff_s(rt.settings, row.tries))
    return 1 if ok else 0
