"""What differs between runs: the answer of ``GET /api/v1/runs-diff?run=A&run=B[&run=C…]``.

The server compares (``server/services/observability/diffs.py``); ``sf job diff`` and the console's
compare page show the same document. Each compared fact of a run is a *key* in a *section*; a row is
kept only when the runs do not all hold the same value for it, and ``same`` counts the keys that
they do.

A value is the JSON text of what the run recorded (``json.dumps`` with sorted keys, so a float
is ``1e-05`` and a string is quoted), or ``None`` when the run has no such key: ``"null"`` (a
recorded null) and ``None`` (absent) stay apart.
"""

from __future__ import annotations

from enum import StrEnum

from starforge.contract.base import Contract

MIN_DIFF_RUNS = 2
MAX_DIFF_RUNS = 8  # the console overlays at most this many curves


class DiffSection(StrEnum):
    """Where a compared fact comes from, in the order a diff lists its rows."""

    HYPERPARAMS = "hyperparams"  # the method's declared parameters, as resolved at submit
    CONFIG = "config"  # the rest of the resolved config, by dotted path
    COMMIT = "commit"  # git_commit, git_dirty
    METHOD = "method"  # method, method_version, method_digest, framework_version
    IMAGE = "image"  # the image as admitted (pinned to a digest where the server resolved one)
    DATASETS = "datasets"  # input -> OWNER/NAME@VERSION as admission resolved it
    PROFILE = "profile"  # the --profile arguments
    INPUTS = "inputs"  # model, train_data, validation_data, init_from as given


class DiffRow(Contract):
    section: str  # a DiffSection's value (read as text: a newer server may add sections)
    key: str  # e.g. "learning_rate", "git_commit", "method_version", "train_data"
    values: list[str | None]  # one per run, in the order asked; JSON text, None = absent


class RunDiff(Contract):
    runs: list[str]  # the run ids, in the order asked
    rows: list[DiffRow]  # only what differs
    same: int  # how many compared keys are equal in all runs
