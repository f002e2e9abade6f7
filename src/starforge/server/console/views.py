"""What the console shows beyond the run API: the files a run produced.

Artifacts are the files under the run's output folder (``<run dir>/out``): checkpoints, the final
model, summaries. Hidden files and folders (e.g. the report SDK's spool) are left out; the list is
capped so a run with a million shards cannot make the page unusable. The job wrote that folder:
it is walked by ``services/artifacts`` (links never followed, names that are not UTF-8 escaped).
"""

from __future__ import annotations

from starforge.contract.api import ArtifactList
from starforge.server.runtime import Runtime
from starforge.server.services import artifacts as out_files
from starforge.server.services import jobs


def artifacts(rt: Runtime, user: str, ref: str) -> ArtifactList:
    with rt.transaction() as session:
        run = jobs.resolve(session, user, ref)
        run_id = run.id
        layout = rt.storage.layout_of(run)
    files, truncated = out_files.listing(layout.dir)
    return ArtifactList(run_id=run_id, root=str(layout.out), files=files, truncated=truncated)
