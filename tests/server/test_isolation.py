"""A server that cannot wall jobs off from each other runs one user's jobs only
(services/access/isolation.py): with several users it refuses every run but an admin's, unless its
admin opted out with ``isolation: none``."""

from __future__ import annotations

import pytest

from starforge.contract.errors import Rejected
from starforge.server.runtime import Runtime
from starforge.server.services.access import users

from .factories import submit


def add_member(rt: Runtime, name: str) -> None:
    with rt.transaction() as session:
        users.ensure_user(session, name, f"token-of-{name}")


def test_with_a_second_user_a_members_run_is_refused_naming_the_fix(rt: Runtime) -> None:
    rt.settings.isolation = "auto"
    add_member(rt, "alice")
    add_member(rt, "bob")
    with pytest.raises(Rejected) as caught:
        submit(rt, "bob")
    assert "cannot keep one user's jobs apart from another's" in caught.value.message
    assert "isolation: none" in (caught.value.hint or "")
    with rt.transaction() as session:
        users.make_admin(session, "alice")
    assert submit(rt, "alice").created  # the admin's own run: the server runs as it chose
    rt.settings.isolation = "none"  # the admin opted out, knowingly
    assert submit(rt, "bob").created
