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
* Where a webhook may go (``services/labops/webhook_targets``): http(s) URLs only, no credentials,
  redirects never followed, no proxy from the environment. On a lab server loopback, private,
  link-local, multicast and reserved addresses are refused in any spelling, when the endpoint is
  added and again at every try, unless an admin allows a range (``notify_allow_cidrs``) or every
  private address (``notify_allow_private``; unset, only the embedded server allows them: it is
  local to its one user, who owns that machine). Each try resolves the host once, checks every
  address and connects to the checked one (Host header and TLS SNI keep the name): no DNS
  rebinding window. Admins are held to the same policy; ``server.yaml`` is how they widen it.
* The signing secret is sealed at rest with the secrets' key ring (``services/access/secret_keys``),
  bound to its endpoint (``webhook/USER/ID``). A row written before migration 0021 holds it in the
  clear (``key_id`` ""); the leader's first notify pass seals it, and every pass re-seals rows
  whose key is not the ring's current one (after a key rotation).
  :func:`reseal` is what a rotation runs before it drops old keys.
* One bad endpoint holds up no other: a pass takes a few due payloads per endpoint, delivers
  endpoints side by side, stops an endpoint's turn at its first failure, and any error (a
  malformed URL stored by an older server, a refused address, a transport error, a secret that
  no longer opens) is one failed try of that row only, logged in one line.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import httpx
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from starforge import __version__
from starforge.contract.errors import NotFound, ServerError, UsageError
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
from starforge.server.services.access import secret_keys
from starforge.server.services.labops import webhook_targets
from starforge.server.services.labops.webhook_targets import Resolver, system_resolve
from starforge.server.settings import Settings

log = logging.getLogger(__name__)
ENDPOINTS_PER_PASS = 50  # endpoints with payloads due, taken in the order they fell due
PER_ENDPOINT = 10  # payloads per endpoint and pass, tried in turn until one fails
WORKERS = 8  # endpoints delivered side by side
PLAIN = ""  # the key id of a secret not sealed yet (a row written before migration 0021)


# ---- URLs and signatures ------------------------------------------------------------------------


def allows_private(settings: Settings) -> bool:
    if settings.notify_allow_private is not None:
        return settings.notify_allow_private
    return settings.embedded


def policy(settings: Settings) -> webhook_targets.Policy:
    """The addresses this server's webhooks may reach."""
    return webhook_targets.Policy(
        allow_private=allows_private(settings), allowed=tuple(settings.notify_allow_cidrs)
    )


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


def _aad(ep: NotifyEndpoint) -> str:
    """What a sealed secret is bound to: copied onto another endpoint, it does not open."""
    return f"webhook/{ep.user}/{ep.id}"


def _open(ring: secret_keys.KeyRing, ep: NotifyEndpoint) -> str:
    if ep.key_id == PLAIN:
        return ep.ciphertext
    return ring.open(ep.ciphertext, ep.key_id, _aad(ep))


def add(
    rt: Runtime, user: str, body: EndpointCreate, resolve: Resolver = system_resolve
) -> EndpointCreated:
    """Register a webhook of ``user``; the answer carries its secret, the only time it does."""
    url = webhook_targets.check(body.url, policy(rt.settings), resolve)
    secret = secrets.token_urlsafe(32)
    endpoint = NotifyEndpoint(
        id="wh-" + secrets.token_hex(6),
        user=str(user),
        url=url,
        events=_events(body.events),
        project=body.project or None,
        created_at=utcnow(),
    )
    ring = secret_keys.load(rt.settings.server_dir)
    endpoint.ciphertext, endpoint.key_id = ring.seal(secret, _aad(endpoint))
    with rt.transaction() as session:
        session.add(endpoint)
        session.flush()
        return EndpointCreated(**_view(session, endpoint), secret=secret)


def reseal(rt: Runtime, ring: secret_keys.KeyRing | None = None) -> set[str]:
    """Seal every endpoint's secret under ``ring``'s current key (those in the clear from before
    0021, those under an older key); the key ids still in use. A key rotation runs this between
    :func:`secret_keys.begin_rotation` and :func:`secret_keys.finish_rotation`."""
    used = select(NotifyEndpoint.key_id).distinct()
    with rt.reading() as session:
        keys = set(session.scalars(used))
    if not keys:
        return keys  # no endpoint: no key file is made for nothing
    ring = ring or secret_keys.load(rt.settings.server_dir)
    if keys == {ring.current}:
        return keys
    with rt.transaction() as session:
        stale = select(NotifyEndpoint).where(NotifyEndpoint.key_id != ring.current)
        for ep in session.scalars(stale.with_for_update()):
            try:
                plain = _open(ring, ep)
            except ServerError:  # its key is gone: each try of it fails, alone
                continue
            ep.ciphertext, ep.key_id = ring.seal(plain, _aad(ep))
    with rt.reading() as session:
        return set(session.scalars(used))


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


def payload(run: Run, detail: dict[str, Any]) -> dict[str, Any]:
    """The body sent for ``run``'s change of status as ``detail`` recorded it
    (``reactions.snapshot``: the run may have moved on since)."""
    status = str(detail["status"])
    return {
        "event": f"run.{status}",
        "run_id": run.id,
        "user": run.user,
        "project": run.project,
        "experiment": run.experiment,
        "method": run.method,
        "status": status,
        "end_reason": detail.get("end_reason"),
        "exit_code": detail.get("exit_code"),
        "attempt": detail.get("attempt"),
        "at": detail["at"],
    }


def enqueue(session: Session, run: Run, detail: dict[str, Any]) -> None:
    """Owe every endpoint that follows the (terminal) status ``detail`` records its payload, in
    the caller's transaction (the ``notify`` reaction's, which marks itself done in it)."""
    status = str(detail["status"])
    at = datetime.fromisoformat(str(detail["at"]))
    endpoints = session.scalars(select(NotifyEndpoint).where(NotifyEndpoint.user == run.user)).all()
    for ep in endpoints:
        if status not in ep.events or (ep.project and ep.project != run.project):
            continue
        session.add(
            NotifyOutbox(
                endpoint_id=ep.id,
                run_id=run.id,
                event=status,
                payload=payload(run, detail),
                created_at=at,
                next_at=at,
            )
        )


def backoff_s(settings: Settings, tries: int) -> float:
    """Wait before try ``tries + 1`` after ``tries`` failed ones."""
    return min(settings.notify_backoff_s * 2 ** max(tries - 1, 0), settings.notify_backoff_max_s)


@dataclass(frozen=True)
class _Due:
    """One endpoint's payloads due in this pass, read in one transaction."""

    endpoint: NotifyEndpoint  # detached: url, user, id, sealed secret
    rows: list[tuple[int, str, Any]]  # (outbox id, event, payload)


def _post(
    rt: Runtime, target: webhook_targets.Target, secret: str, outbox_id: int, event: str, data: Any
) -> int:
    """POST one signed payload to the checked address; its HTTP status (the body is not read)."""
    body = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    ts = int(time.time())
    headers = {
        "Host": target.host_header,
        "Content-Type": "application/json",
        "User-Agent": f"StarForge/{__version__}",
        SIGNATURE_HEADER: sign(secret, ts, body),
        TIMESTAMP_HEADER: str(ts),
        DELIVERY_HEADER: str(outbox_id),
        EVENT_HEADER: f"run.{event}",
    }
    extensions = {"sni_hostname": target.sni} if target.sni else None
    timeout = rt.settings.notify_timeout_s
    with (
        httpx.Client(trust_env=False, follow_redirects=False, timeout=timeout) as client,
        client.stream(
            "POST", target.url, content=body, headers=headers, extensions=extensions
        ) as response,
    ):
        return response.status_code


def _due(rt: Runtime) -> list[_Due]:
    now = utcnow()
    owed = (
        NotifyOutbox.delivered_at.is_(None),
        NotifyOutbox.gave_up_at.is_(None),
        NotifyOutbox.next_at <= now,
    )
    found = []
    with rt.reading() as session:
        endpoints = session.scalars(
            select(NotifyOutbox.endpoint_id)
            .where(*owed)
            .group_by(NotifyOutbox.endpoint_id)
            .order_by(func.min(NotifyOutbox.next_at), NotifyOutbox.endpoint_id)
            .limit(ENDPOINTS_PER_PASS)
        ).all()
        for endpoint_id in endpoints:
            ep = session.get(NotifyEndpoint, endpoint_id)
            if ep is None:
                continue
            rows = session.execute(
                select(NotifyOutbox.id, NotifyOutbox.event, NotifyOutbox.payload)
                .where(NotifyOutbox.endpoint_id == endpoint_id, *owed)
                .order_by(NotifyOutbox.next_at, NotifyOutbox.id)
                .limit(PER_ENDPOINT)
            ).all()
            session.expunge(ep)
            found.append(_Due(ep, [(i, e, p) for i, e, p in rows]))
    return found


def _try(rt: Runtime, ep: NotifyEndpoint, row: tuple[int, str, Any], resolve: Resolver) -> bool:
    """One try of one payload, recorded whatever goes wrong; whether it was delivered."""
    outbox_id, event, data = row
    code: int | None = None
    try:
        target = webhook_targets.pin(ep.url, policy(rt.settings), resolve)
        secret = _open(secret_keys.load(rt.settings.server_dir), ep)
        code = _post(rt, target, secret, outbox_id, event, data)
        error = "" if 200 <= code < 300 else f"HTTP {code}"
    except (httpx.HTTPError, OSError) as exc:
        error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    except Exception as exc:  # a refused address, a secret that no longer opens, a bad URL, a bug
        error = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
        log.warning("webhook %s, payload %s: %s", ep.id, outbox_id, error)
    return bool(_record(rt, outbox_id, ep.id, code, error[:500]))


def _deliver_endpoint(rt: Runtime, due: _Due, resolve: Resolver) -> int:
    """The endpoint's due payloads in turn, until one fails (the rest wait for a later pass)."""
    delivered = 0
    for row in due.rows:
        if not _try(rt, due.endpoint, row, resolve):
            break
        delivered += 1
    return delivered


def deliver_due(rt: Runtime, resolve: Resolver = system_resolve) -> int:
    """Try the payloads that are due, endpoints side by side; returns how many were delivered.

    ``resolve`` is the one seam: how host names become addresses (tests answer it themselves)."""
    reseal(rt)
    groups = _due(rt)
    if not groups:
        return 0
    with ThreadPoolExecutor(max_workers=min(WORKERS, len(groups))) as pool:
        return sum(pool.map(lambda due: _deliver_endpoint(rt, due, resolve), groups))


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
