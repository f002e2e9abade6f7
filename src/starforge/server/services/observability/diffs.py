"""What differs between 2 to 8 runs (``GET /runs-diff``): one :class:`RunDiff` for ``sf job diff``
and the console's compare page.

Each run is read as ``GET /runs/{ref}`` reads it
(:func:`starforge.server.services.runs.jobs.resolve`: an id or an unambiguous prefix; another
member's run answers 404 as if it did not exist), so a comparison reveals nothing a caller could not
read run by run.

What is compared, per section (:class:`~starforge.contract.diffs.DiffSection`):

* ``hyperparams``: every declared parameter as resolved at submit (``-s``, else the config, else
  the default), by its name.
* ``config``: the resolved config admission stored for the runner, flattened to dotted paths
  (a list is one value). A parameter's own path is **not** listed here: the config holds the
  value the parameter put there, so ``-s learning_rate=…`` is one row (``hyperparams``,
  ``learning_rate``), never a second ``config`` row of the same number. The paths left out are
  those the catalog's method declares for its parameters and those the run's lock binds. The
  datasets admission recorded in the config are the ``datasets`` section's. A run admitted before
  configs were kept has none: the section is then compared only when every run has one.
* ``commit``: ``git_commit`` and ``git_dirty``; ``method``: ``method``, ``method_version``,
  ``method_digest`` and ``framework_version`` (when recorded); ``image``: the image as admitted
  (with its digest where the server pinned one); ``datasets``: each input's
  ``OWNER/NAME@VERSION``; ``profile``: the ``--profile`` arguments; ``inputs``: ``model``,
  ``train_data``, ``validation_data`` and ``init_from`` as given.

Rows come in section order, keys sorted within a section; ``same`` counts the keys every run
holds alike. Values are JSON text (see :mod:`starforge.contract.diffs`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from starforge.catalog.loader import find_method
from starforge.contract.datasets import RESOLVED_KEY, resolved_of
from starforge.contract.diffs import (
    MAX_DIFF_RUNS,
    MIN_DIFF_RUNS,
    DiffRow,
    DiffSection,
    RunDiff,
)
from starforge.contract.errors import CompareRefused
from starforge.server.db.models import Run
from starforge.server.runtime import Runtime
from starforge.server.services.access import users
from starforge.server.services.runs import jobs

Facts = dict[tuple[DiffSection, str], str]
_ORDER = {section: i for i, section in enumerate(DiffSection)}


def compare(rt: Runtime, user: users.Caller, refs: list[str]) -> RunDiff:
    """The diff of the runs ``refs`` names, in that order (a run may be named twice)."""
    if not MIN_DIFF_RUNS <= len(refs) <= MAX_DIFF_RUNS:
        raise CompareRefused(
            f"a comparison takes {MIN_DIFF_RUNS} to {MAX_DIFF_RUNS} runs; {len(refs)} given",
            hint="name each run with its own `run` parameter: /runs-diff?run=A&run=B",
            details={"runs": len(refs), "min": MIN_DIFF_RUNS, "max": MAX_DIFF_RUNS},
        )
    with rt.reading() as session:
        runs = [jobs.resolve(session, user, ref) for ref in refs]
        return diff_runs(runs)


def diff_runs(runs: list[Run]) -> RunDiff:
    """The rows that differ among ``runs`` (rows of stored data only: no I/O)."""
    skip = _param_paths(runs)
    with_config = all(isinstance(r.config, dict) for r in runs)
    facts = [run_facts(r, skip, with_config=with_config) for r in runs]
    keys = sorted({k for f in facts for k in f}, key=lambda k: (_ORDER[k[0]], k[1]))
    rows: list[DiffRow] = []
    same = 0
    for section, key in keys:
        values = [f.get((section, key)) for f in facts]
        if all(v == values[0] for v in values):
            same += 1
        else:
            rows.append(DiffRow(section=section.value, key=key, values=values))
    return RunDiff(runs=[r.id for r in runs], rows=rows, same=same)


def run_facts(run: Run, skip: set[str], *, with_config: bool = True) -> Facts:
    """Every compared fact of one run, as JSON text by (section, key); a fact the run does not
    have is absent (a parameter or config value recorded as null is ``"null"``)."""
    spec = run.spec or {}
    method = spec.get("method") or {}
    provenance = spec.get("provenance") or {}
    found: dict[tuple[DiffSection, str], Any] = {}
    for name, value in (spec.get("hyperparams") or {}).items():
        found[DiffSection.HYPERPARAMS, name] = value
    if with_config:
        config = {k: v for k, v in (run.config or {}).items() if k != RESOLVED_KEY}
        for path, value in _flatten(config):
            if not _under_any(path, skip):
                found[DiffSection.CONFIG, path] = value
    optional: dict[tuple[DiffSection, str], Any] = {
        (DiffSection.COMMIT, "git_commit"): provenance.get("git_commit"),
        (DiffSection.COMMIT, "git_dirty"): bool(provenance.get("git_dirty", False)),
        (DiffSection.METHOD, "method"): run.method,
        (DiffSection.METHOD, "method_version"): method.get("version"),
        (DiffSection.METHOD, "method_digest"): method.get("digest"),
        (DiffSection.METHOD, "framework_version"): method.get("framework_version") or None,
        (DiffSection.IMAGE, "image"): run.image or None,
        (DiffSection.PROFILE, "profiles"): spec.get("profiles"),
        (DiffSection.INPUTS, "init_from"): _init_from(spec.get("init_from")),
    }
    for name, resolved in resolved_of(run.config).items():
        optional[DiffSection.DATASETS, name] = resolved.ref
    for name, ref in (spec.get("inputs") or {}).items():
        optional[DiffSection.INPUTS, name] = ref
    found.update((key, value) for key, value in optional.items() if value is not None)
    return {key: _text(value) for key, value in found.items()}


def _param_paths(runs: list[Run]) -> set[str]:
    """The config paths the runs' parameters set: the catalog's declarations of each run's
    method, and the bindings each run's lock recorded (a method the catalog no longer has)."""
    paths: set[str] = set()
    for run in runs:
        method = (run.spec or {}).get("method") or {}
        declared = find_method(str(method.get("id") or run.method))
        if declared is not None:
            paths.update(p.path for p in declared.params.values() if p.path)
        for binding in (method.get("bindings") or {}).values():
            if isinstance(binding, dict) and binding.get("path"):
                paths.add(str(binding["path"]))
    return paths


def _init_from(value: Any) -> Any:
    """What the user asked to start from (admission's resolved path differs by run: not it)."""
    if not isinstance(value, dict):
        return None
    return {k: value.get(k) for k in ("run_id", "kind", "step")}


def _flatten(value: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, item in value.items():
        path = f"{prefix}{key}"
        if isinstance(item, dict) and item:
            yield from _flatten(item, path + ".")
        else:
            yield path, item


def _under_any(path: str, roots: set[str]) -> bool:
    return path in roots or any(path.startswith(root + ".") for root in roots)


def _text(value: Any) -> str:
    return json.dumps(value, sort_keys=True)
