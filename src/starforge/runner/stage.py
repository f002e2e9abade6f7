"""Stage a run for a job that runs as its member's Unix account: ``python -m starforge.runner
stage BINDING_JSON GID``, run by a root server before it submits the attempt (Slurm's ``sbatch
--uid/--gid``).

Such a job's runner is the member's account, not root, so it could not read the blob store or
the dataset cache, which are root's alone (``Storage.close_private``): if it could, so could
every other member's job. The server, root, therefore does here what such a runner cannot:

- unpacks the package into the run's ``work`` (the runner then finds it complete and reuses it,
  the way node 1 reuses node 0's);
- fetches the run's dataset versions into the cache and links each into the run's own views
  (``<run>/datasets/``, root's, readable by the member's group ``GID`` only: the job reads its
  admitted versions and can change none of them), and writes what the runner needs to point the
  job's inputs at them to ``<run>/datasets/staged.json`` (:func:`read`).

Staging is idempotent: a retried attempt reuses the unpacked package and the views.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from starforge.contract.atomic import write_json_atomic
from starforge.contract.datasets import resolved_of
from starforge.contract.env import Binding
from starforge.contract.errors import RunnerError, StarForgeError
from starforge.contract.jobspec import InputRef, JobSpec, Manifest
from starforge.contract.layout import RunLayout
from starforge.contract.packs import read_extents
from starforge.runner import datasets
from starforge.runner.unpack import unpack


def stage(binding: Binding, gid: int) -> list[str]:
    """Unpack the run's package and link its datasets into the run; return lines for its log."""
    run = RunLayout(Path(binding.run_dir))
    storage = Path(binding.storage_root)
    data = json.loads(run.run_json.read_text())
    packs = read_extents(data.get("packs"))
    spec, manifest = JobSpec.read(data["spec"]), Manifest.read(data["manifest"])
    written = unpack(manifest, storage, run.work, packs)
    said = [f"the server unpacked {written} files into {run.work}"] if written else []
    resolved = resolved_of(data.get("config"))
    refs: dict[str, InputRef] = {}
    found: dict[str, str] = {}
    if resolved:
        inputs = {key: getattr(spec.inputs, key) for key in resolved}
        refs, found, lines = datasets.prepare(storage, resolved, inputs, packs)
        views = datasets.private_views(storage, run.dir, gid, [Path(v) for v in found.values()])
        refs, found = datasets.through_views(views, refs, found)
        said += lines
    run.datasets.mkdir(exist_ok=True)
    os.chown(run.datasets, 0, gid)
    os.chmod(run.datasets, 0o750)
    record = {
        "refs": {k: r.model_dump(mode="json") for k, r in refs.items()},
        "env": found,
        "said": said,
    }
    write_json_atomic(run.staged, record, mode=0o640)
    os.chown(run.staged, 0, gid)
    return said


def read(run: RunLayout) -> tuple[dict[str, InputRef], dict[str, str], list[str]]:
    """What :func:`stage` recorded: the inputs pointing into the run's views, the
    ``<NAME>_DATA_DIR`` variables, and the lines for the log."""
    try:
        record = json.loads(run.staged.read_text())
    except (OSError, ValueError) as exc:
        raise RunnerError(
            f"the server did not stage this run's datasets ({run.staged}: {exc})",
            hint="retry the run; if it fails again, the server's log says why staging failed",
        ) from None
    refs = {k: InputRef.model_validate(v) for k, v in record.get("refs", {}).items()}
    return refs, dict(record.get("env", {})), [str(line) for line in record.get("said", [])]


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not argv[1].isdigit():
        print("usage: python -m starforge.runner stage BINDING_JSON GID", file=sys.stderr)
        return 2
    try:
        binding = Binding.read(Path(argv[0]).read_bytes())
        for line in stage(binding, int(argv[1])):
            print(line)
    except (StarForgeError, OSError, ValueError, KeyError) as exc:
        message = exc.message if isinstance(exc, StarForgeError) else str(exc)
        print(f"could not stage the run: {message}", file=sys.stderr)
        return 1
    return 0
