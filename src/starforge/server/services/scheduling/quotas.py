"""Quotas: each user's limits, and their only writer.

A user's limits are their own row in ``quotas`` when an admin set one, else the server's
``quota_defaults``. Only admins change them (:func:`set_quota`); a change wakes the scheduler, and
a new priority applies to the user's queued runs at once. What the limits are *used* against
(GPUs held, runs active) lives in :mod:`starforge.server.services.scheduling.usage`; how the
scheduler applies them in :mod:`starforge.server.services.scheduling.limits`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from pydantic import ValidationError
from sqlalchemy import Connection, select
from sqlalchemy.orm import Session

from starforge.contract.api import Quota, QuotaUpdate
from starforge.contract.errors import UsageError
from starforge.contract.states import JobStatus
from starforge.server.db.models import Run, utcnow
from starforge.server.db.resources import QuotaRow
from starforge.server.runtime import Runtime
from starforge.server.services.access import users
from starforge.server.settings import Settings

# Every user's own quota, as rows (user, *the fields of _quota) for one read of the whole table.
ALL_ROWS = select(
    QuotaRow.user,
    QuotaRow.max_gpus,
    QuotaRow.max_gpus_per_series,
    QuotaRow.max_runs,
    QuotaRow.allowed_profiles,
    QuotaRow.priority,
)


def _quota(
    max_gpus: int | None,
    per_series: dict[str, int] | None,
    max_runs: int | None,
    allowed: list[str] | None,
    priority: int,
) -> Quota:
    """A stored quota row's fields as a :class:`Quota` (SQL NULL profiles: every profile)."""
    return Quota(
        max_gpus=max_gpus,
        max_gpus_per_series=dict(per_series or {}),
        max_runs=max_runs,
        allowed_profiles=list(allowed) if allowed is not None else None,
        priority=priority,
    )


def of_rows(rows: Sequence[Sequence[Any]]) -> dict[str, Quota]:
    """The rows of :data:`ALL_ROWS` as each user's quota."""
    return {user: _quota(*fields) for user, *fields in rows}


def defaults(settings: Settings) -> Quota:
    return Quota.model_validate(settings.quota_defaults.model_dump())


_COLUMNS = QuotaRow.__table__.c
# One user's own quota, as the fields of _quota: a Core read (no ORM object, no identity map).
_OF_USER = select(
    _COLUMNS.max_gpus,
    _COLUMNS.max_gpus_per_series,
    _COLUMNS.max_runs,
    _COLUMNS.allowed_profiles,
    _COLUMNS.priority,
).where(_COLUMNS.user == sa.bindparam("user"))


def effective(session: Session | Connection, settings: Settings, user: str) -> tuple[Quota, bool]:
    """The user's quota and whether it is the server's default, as the transaction sees it."""
    row = session.execute(_OF_USER, {"user": user}).first()
    if row is None:
        return defaults(settings), True
    return _quota(*row), False


# The user's own quota as columns of a SELECT without a FROM (a submit adds them to its one read
# of the submitter): each field NULL, and ``quota_set`` false, when an admin set none.
OWN: tuple[sa.Label[Any], ...] = (
    *(
        select(c)
        .where(_COLUMNS.user == sa.bindparam("user"))
        .scalar_subquery()
        .label(f"quota_{c.name}")
        for c in _OF_USER.selected_columns
    ),
    sa.exists().where(_COLUMNS.user == sa.bindparam("user")).label("quota_set"),
)


def of_own(settings: Settings, row: Any) -> Quota:
    """The quota a row holding the columns of :data:`OWN` gives: the user's, else the default."""
    if not row.quota_set:
        return defaults(settings)
    return _quota(*(getattr(row, f"quota_{c.name}") for c in _OF_USER.selected_columns))


def _validate(rt: Runtime, quota: Quota) -> None:
    profiles = {p.name for p in rt.settings.profiles}
    unknown = sorted(set(quota.allowed_profiles or []) - profiles)
    if unknown:
        raise UsageError(
            f"unknown profile(s) in the allowed list: {', '.join(unknown)}",
            hint=f"valid profiles: {', '.join(sorted(profiles))}",
        )
    series = {n.series for n in rt.inventory} | {p.series for p in rt.settings.profiles}
    bad = sorted(set(quota.max_gpus_per_series) - series)
    if bad:
        raise UsageError(
            f"unknown GPU series in the per-series limits: {', '.join(bad)}",
            hint=f"GPU series here: {', '.join(sorted(series))}",
        )


def _apply(base: Quota, body: QuotaUpdate) -> Quota:
    data: dict[str, Any] = base.model_dump()
    given = body.model_fields_set
    for name in ("max_gpus", "max_runs"):
        if name in given:
            data[name] = getattr(body, name)
    if "allowed_profiles" in given:
        allowed = body.allowed_profiles
        data["allowed_profiles"] = sorted(set(allowed)) if allowed is not None else None
    if "priority" in given:
        if body.priority is None:
            raise UsageError("priority cannot be null", hint="give a whole number, e.g. 0")
        data["priority"] = body.priority
    per_series = dict(data["max_gpus_per_series"])
    for series, limit in body.max_gpus_per_series.items():
        if limit is None:
            per_series.pop(series, None)
        elif limit < 0:
            raise UsageError(f"the {series} GPU limit must be 0 or more (got {limit})")
        else:
            per_series[series] = limit
    data["max_gpus_per_series"] = per_series
    try:
        return Quota.model_validate(data)
    except ValidationError as exc:
        raise UsageError(f"invalid quota: {exc.errors()[0]['msg']}") from None


def _store(session: Session, admin: str, user: str, new: Quota) -> None:
    row = session.get(QuotaRow, user)
    if row is None:
        row = QuotaRow(user=user)
        session.add(row)
    row.max_gpus = new.max_gpus
    row.max_gpus_per_series = dict(new.max_gpus_per_series)
    row.max_runs = new.max_runs
    row.allowed_profiles = list(new.allowed_profiles) if new.allowed_profiles is not None else None
    row.priority = new.priority
    row.updated_at = utcnow()
    row.updated_by = admin


def set_quota(rt: Runtime, admin: str, user: str, body: QuotaUpdate) -> Quota:
    """Set ``user``'s quota as ``admin`` (the route checks the role); the user's queued runs
    take the new priority."""
    with rt.transaction() as session:
        users.require_known(session, user)
        current, _ = effective(session, rt.settings, user)
        new = _apply(defaults(rt.settings) if body.reset else current, body)
        _validate(rt, new)
        if body.reset and body.model_fields_set == {"reset"}:  # back to the defaults
            row = session.get(QuotaRow, user)
            if row is not None:
                session.delete(row)
        else:
            _store(session, admin, user, new)
        session.execute(
            sa.update(Run)
            .where(Run.user == user, Run.status == JobStatus.QUEUED.value)
            .values(priority=new.priority)
        )
    rt.wake_scheduler()
    return new
