"""One node's record within an attempt: where it runs, what it was started as, how it ended.

The control plane keeps one :class:`NodeRecord` per node rank of each attempt (stored as JSON on
the attempt row). Its ``state`` moves only as :data:`starforge.contract.states.NODE_TRANSITIONS`
allows, through ``server/statemachine.node_event``. Records are read leniently: fields written by
a newer server are ignored, fields an older one never wrote take their defaults.
"""

from __future__ import annotations

from starforge.contract.base import Contract
from starforge.contract.states import EndReason, NodeState


class NodeRecord(Contract):
    node: str = ""  # the inventory node it was placed on
    pool: str = ""  # the pool of the run it belongs to
    ref: str | None = None  # the executor's reference of its runner, once started
    state: NodeState = NodeState.PENDING
    exit_code: int | None = None  # None while it runs, and for a lost node
    lost: bool = False  # it ended without reporting an exit (vanished, silent, never started)
    end_reason: EndReason | None = None  # why it ended, as its runner or the platform said
    why: str = ""  # for a lost node: what the platform saw
    beat: float | None = None  # epoch seconds of its latest sign of life (None: never beat)

    @property
    def exited(self) -> bool:
        return self.state is NodeState.EXITED

    @property
    def live_ref(self) -> str | None:
        """The reference of a runner that may still run (started, not yet exited)."""
        return self.ref if self.ref and not self.exited else None
