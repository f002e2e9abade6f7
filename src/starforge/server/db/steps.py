"""The steps of pipelines: which run is which step of which training run.

One row per step run (``sf submit --then ...``, or ``sf export``): the run that is the step, the
run it is a step of (the *root*: the training run), its 0-based place and its action. The unique
pair (root, position) is what makes each step exist once: the transaction that records a run's
success inserts the next step's row, and a second insert of the same step fails that whole
transaction instead of starting the step twice. Rows go with their runs (``ON DELETE CASCADE``).
"""

from __future__ import annotations

from sqlalchemy import ForeignKey, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from starforge.server.db.models import Base


class RunStep(Base):
    __tablename__ = "run_steps"
    __table_args__ = (UniqueConstraint("root_run_id", "position", name="uq_run_steps_root_pos"),)

    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    root_run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    position: Mapped[int] = mapped_column(Integer)
    action: Mapped[str] = mapped_column(String(20))
