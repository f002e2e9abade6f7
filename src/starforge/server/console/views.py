"""What the console shows beyond the run API: the files a run produced, and the actions a caller
may take on a run or a sweep now.

Artifacts are the files under the run's output folder (``<run dir>/out``): checkpoints, the final
model, summaries. Hidden files and folders (e.g. the report SDK's spool) are left out; the list is
capped so a run with a million shards cannot make the page unusable. The job wrote that folder:
it is walked by ``services/observability/artifacts`` (links never followed, names that are not UTF-8
escaped).

Allowed actions are what the API would accept, decided by the same rules as the action routes:
the authorization table's rule for acting on a run (:data:`authz.ACT_ON_RUN`, which the routes
``POST /runs/{ref}/stop|pause|resume|retry`` and ``POST /sweeps/{id}/stop`` declare; a test keeps
them in step) and each action's allowed statuses (``contract/states``,
``services/workflows/sweeps``).
"""

from __future__ import annotations

from starforge.contract.api import ArtifactList
from starforge.contract.console import AllowedActions, RunAction
from starforge.contract.errors import Forbidden
from starforge.contract.states import PAUSABLE, RESUMABLE, RETRYABLE, STOPPABLE, JobStatus
from starforge.server.api import authz
from starforge.server.runtime import Runtime
from starforge.server.services.access import users
from starforge.server.services.observability import artifacts as out_files
from starforge.server.services.runs import jobs
from starforge.server.services.workflows import sweeps

# Each action on a run and the statuses it starts from (services/runs/actions.py checks the same
# sets).
RUN_ACTIONS: dict[RunAction, frozenset[JobStatus]] = {
    "stop": STOPPABLE,
    "pause": PAUSABLE,
    "resume": RESUMABLE,
    "retry": RETRYABLE,
}


def artifacts(rt: Runtime, user: users.Caller, ref: str) -> ArtifactList:
    with rt.transaction() as session:
        run = jobs.resolve(session, user, ref)
        run_id = run.id
        layout = rt.storage.layout_of(run)
    files, truncated = out_files.listing(layout.dir)
    return ArtifactList(run_id=run_id, root=str(layout.out), files=files, truncated=truncated)


def _refusal(caller: users.Caller) -> str:
    """The API's own words if ``caller`` may act on no run at all; "" if the role allows it."""
    try:
        authz.permit(authz.ACT_ON_RUN, caller)
    except Forbidden as refused:
        return refused.message
    return ""


def run_actions(rt: Runtime, caller: users.Caller, ref: str) -> AllowedActions:
    """The actions ``caller`` may take on the run ``ref`` in its current status."""
    with rt.reading() as session:
        run = jobs.resolve(session, caller, ref)  # another's run: 404, as GET /runs/{ref}
        run_id, status = run.id, JobStatus(run.status)
    refused = _refusal(caller)
    if refused:
        return AllowedActions(target=run_id, refused=refused)
    allowed = [name for name, start in RUN_ACTIONS.items() if status in start]
    return AllowedActions(target=run_id, actions=allowed)


def sweep_actions(rt: Runtime, caller: users.Caller, ref: str) -> AllowedActions:
    """``["stop"]`` while some variant of the sweep can still be stopped and ``caller`` may."""
    sweep = sweeps.get(rt, caller, ref)
    refused = _refusal(caller)
    if refused:
        return AllowedActions(target=sweep.sweep_id, refused=refused)
    live = any(v.status in sweeps.STOPPABLE_BY_SWEEP for v in sweep.variants)
    return AllowedActions(target=sweep.sweep_id, actions=["stop"] if live else [])
