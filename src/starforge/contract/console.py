"""What the web console asks the server beyond the CLI's calls: the actions a caller may take now.

The console draws a button only for an action the API would accept: the caller's role and token
(``server/api/authz.py``, the one authorization table) and the run's status (the action's
allowed statuses in :mod:`starforge.contract.states`) both decide it, on the server, so the page
never keeps a copy of either rule.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from starforge.contract.base import Contract

RunAction = Literal["stop", "pause", "resume", "retry"]


class AllowedActions(Contract):
    """``GET /runs/{ref}/actions`` and ``GET /sweeps/{sweep_id}/actions``."""

    target: str  # the run's or the sweep's id
    actions: list[RunAction] = Field(default_factory=list)  # a sweep's is at most ["stop"]
    # When the caller may take no action at all (a viewer, a console link's token): the API's
    # own refusal, so the page can say why it shows no buttons. "" when the role allows them.
    refused: str = ""
