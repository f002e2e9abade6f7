"""``GET /runs-diff?run=A&run=B[&run=C…]``: what differs between 2 to 8 runs
(services/observability/diffs).

Each run named is read under the ``read-run`` rule, as ``GET /runs/{ref}`` reads it: a viewer or
member compares their own runs (another's answers 404), an operator or admin anyone's."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from starforge.contract.diffs import RunDiff
from starforge.server.api.authz import ReadRun
from starforge.server.api.deps import RuntimeDep
from starforge.server.services.observability import diffs

router = APIRouter()


@router.get("/runs-diff", response_model=RunDiff)
def runs_diff(
    rt: RuntimeDep,
    user: ReadRun,
    run: Annotated[list[str] | None, Query(description="a run id or prefix, 2 to 8 times")] = None,
) -> RunDiff:
    """The rows that differ among the runs, in the order given (fewer than 2 or more than 8
    runs: 422)."""
    return diffs.compare(rt, user, run or [])
