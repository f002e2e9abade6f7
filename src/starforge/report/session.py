"""The process's one reporting session behind ``starforge.report``'s functions.

Kept apart from the package's facade so the Hugging Face callback (``report.hf``) can use the
session without importing the package that lazily imports it.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Mapping
from typing import Any

from starforge.report.run import Run, Settings

FINISH_TIMEOUT_S = 10.0
_run: Run | None = None
_lock = threading.Lock()


def init(hparams: Mapping[str, Any] | None = None, **options: Any) -> Run:
    """Start reporting for this process (once; later calls return the same run)."""
    global _run
    with _lock:
        if _run is None:
            _run = Run(Settings.from_env(), **options)
            _run.started()
        run = _run
    if hparams:
        run.log_hparams(hparams)
    return run


def current() -> Run | None:
    return _run


def log(metrics: Mapping[Any, Any], step: int | None = None) -> None:
    """Record metrics (nested dicts flatten with ``/``) at ``step`` (default: the next one)."""
    run = _run
    if run is None:
        run = init()
    run.log(metrics, step)


def log_hparams(params: Mapping[Any, Any]) -> None:
    """Record hyperparameters (merged with earlier ones; nested dicts flatten with ``/``)."""
    (_run or init()).log_hparams(params)


def flush(timeout_s: float = FINISH_TIMEOUT_S) -> bool:
    """Wait until everything logged so far reached the server; False if it did not in time."""
    return _run.flush(timeout_s) if _run is not None else True


def finish(timeout_s: float = FINISH_TIMEOUT_S) -> None:
    """Send what is left and stop; a later ``log`` starts a new session."""
    global _run
    with _lock:
        run, _run = _run, None
    if run is not None:
        run.finish(timeout_s)


atexit.register(finish, 5.0)  # at exit, wait less for an unreachable server
