"""Why a run waits never names another user's run to a member: the numbers stay, the id goes.

A reservation or a busy node is explained with the runs behind it ("used by r-… until it ends");
to a member or viewer, another user's run id there is replaced, so `sf job ls`/`status` and the
log stream cannot be used to learn which runs exist. Operators and admins see every id.
"""

from __future__ import annotations

from starforge.contract.auth import Role
from starforge.server.runtime import Runtime
from starforge.server.services.access import users
from starforge.server.services.runs import jobs

from .factories import schedule, submit


def busy_cluster(rt: Runtime) -> tuple[str, str]:
    """Bob's two runs hold both h200 nodes; alice's waits for one of them."""
    bob = [submit(rt, "bob", profiles=["h200:8"]).run_id for _ in range(2)]
    assert sorted(schedule(rt)) == sorted(bob)
    alice = submit(rt, "alice", profiles=["h200:8"]).run_id
    assert schedule(rt) == []
    return bob[0], alice


def test_a_member_sees_why_it_waits_without_the_other_users_run_ids(rt: Runtime) -> None:
    bob_run, alice_run = busy_cluster(rt)
    admin_view = jobs.get(rt, users.Caller("root", Role.ADMIN), alice_run)
    assert admin_view.pending is not None and bob_run in admin_view.pending.detail
    member = users.Caller("alice", Role.MEMBER)
    for view in (jobs.get(rt, member, alice_run), jobs.page(rt, member).runs[0]):
        assert view.pending is not None and view.pending.detail
        texts = [view.reason, view.pending.message, view.pending.detail, view.pending.next_event]
        assert not any(bob_run in t for t in [*texts, *view.pending.blocking_runs])
        assert "another user's run" in view.pending.detail
    assert bob_run in jobs.hide_others_in(rt, users.Caller("root", Role.ADMIN), bob_run)
    assert jobs.hide_others_in(rt, member, f"used by {bob_run}") == "used by another user's run"
    assert jobs.hide_others_in(rt, member, f"see {alice_run}") == f"see {alice_run}"
