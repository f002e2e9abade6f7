"""The curves a job could not deliver, taken from its run's folder when an attempt ends.

The report SDK spools what the server did not take (it was down, or away when the job ended)
under the run's ``out`` dir, and the job's runner sends what it can before it reports the exit
(:mod:`starforge.runner.spooldrain`). What is still there when the attempt ends, a succeeded run
having no next attempt to send it, is read here by :func:`take`, in the transaction that ends the
attempt (:func:`starforge.server.services.runs.lifecycle.finish_attempt`, whether the runner said so
or the reconciler found its exit record): before the run's status changes, so the final metrics a
pipeline's next step records include them. Each body is stored as the ingest endpoint stores it
(by run, key and step: a body the runner had already delivered is stored once, not twice), but a
body of an older attempt never replaces what a newer one logged. The files go only after the
transaction committed (:meth:`~starforge.contract.spoolfiles.Taken.remove`, run by
``lifecycle.act_on``): a crash before leaves them for the next end of an attempt.

The folder is the job's: :mod:`starforge.contract.spoolfiles` reads it without following links,
and a body that is not a valid batch is skipped and counted, never a reason to keep a run from
ending.
"""

from __future__ import annotations

import logging

from pydantic import ValidationError
from sqlalchemy.orm import Session

from starforge.contract import spoolfiles
from starforge.contract.api import IngestRequest
from starforge.contract.errors import StarForgeError
from starforge.server.db.models import Run
from starforge.server.runtime import Runtime
from starforge.server.services.observability import metricstore

log = logging.getLogger(__name__)


def take(rt: Runtime, session: Session, run: Run) -> spoolfiles.Taken | None:
    """Store the bodies the run's job left in its spool; the files to remove after the commit."""
    out_dir = rt.storage.layout_of(run).out
    try:
        files = spoolfiles.read(out_dir)
    except OSError as exc:  # a folder this server may not read (a member's own, on Slurm)
        log.warning("run %s: cannot read its report spool: %s", run.id, exc)
        return None
    if not files:
        return None
    stored = skipped = 0
    for spooled in files:
        for line, _ in spooled.bodies():
            try:  # read as written, by an SDK that may be a version apart
                stored += metricstore.store_late(session, run, IngestRequest.read(line))
            except (ValidationError, StarForgeError):
                skipped += 1
    log.info(
        "run %s: %d point(s) taken from %d spool file(s) its job left; %d body(ies) skipped",
        run.id, stored, len(files), skipped,
    )  # fmt: skip
    return spoolfiles.Taken(out_dir, [f.name for f in files])
