"""What the console shows beyond the run API: the files a run produced.

Artifacts are the files under the run's output folder (``<run dir>/out``): checkpoints, the final
model, summaries. Hidden files and folders (e.g. the report SDK's spool) are left out; the list is
capped so a run with a million shards cannot make the page unusable.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

from starforge.contract.api import ArtifactEntry, ArtifactList
from starforge.server.runtime import Runtime
from starforge.server.services import jobs

MAX_ARTIFACTS = 500


def list_files(root: Path, limit: int = MAX_ARTIFACTS) -> tuple[list[ArtifactEntry], bool]:
    """Files under ``root`` in path order (hidden ones skipped); and whether the list was cut."""
    found: list[ArtifactEntry] = []
    if not root.is_dir():
        return found, False
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(f for f in files if not f.startswith(".")):
            path = Path(folder) / name
            try:
                stat = path.stat()
            except OSError:
                continue  # removed while we listed
            if len(found) >= limit:
                return found, True
            found.append(
                ArtifactEntry(
                    path=path.relative_to(root).as_posix(),
                    size=stat.st_size,
                    modified=datetime.fromtimestamp(stat.st_mtime, UTC),
                )
            )
    return found, False


def artifacts(rt: Runtime, user: str, ref: str) -> ArtifactList:
    with rt.transaction() as session:
        run = jobs.resolve(session, user, ref)
        run_id = run.id
        root = rt.storage.run_dir(run.user, run.project, run.experiment, run.id) / "out"
    files, truncated = list_files(root)
    return ArtifactList(run_id=run_id, root=str(root), files=files, truncated=truncated)
