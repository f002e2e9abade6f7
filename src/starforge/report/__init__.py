"""``starforge.report``: curves, hyperparameters and metadata from inside a training job.

    import starforge.report as report

    report.init(hparams={"lr": 1e-5, "model": "qwen"})   # optional: log() starts it too
    for step in range(steps):
        report.log({"loss": loss, "eval": {"acc": acc}}, step=step)   # -> loss, eval/acc
    report.finish()                                        # optional: runs at exit anyway

The platform sets the job's environment (run id, ingest endpoint, run-scoped token); without it
(a script run by hand) every call is a silent no-op. ``log`` never raises into training and never
waits for the network: a background thread batches and sends. Points logged while the server is
unreachable are kept (in memory, then in a spool file under ``$FORGE_OUT_DIR``) and sent later,
by this process or by the run's next attempt. ``finish`` drains, and runs by itself at exit.

For Hugging Face / TRL trainers, ``trainer.add_callback(report.TrainerCallback())`` sends every
value the trainer logs; the ``trl/*`` catalog methods are wired with it already.

Only the standard library, httpx and pydantic are used (through :mod:`starforge.client`), so this
runs in any training image; ``TrainerCallback`` imports ``transformers`` only when it is used.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from starforge.report.run import Run, Settings

if TYPE_CHECKING:
    from starforge.report.hf import TrainerCallback

__all__ = [
    "Run",
    "TrainerCallback",
    "current",
    "finish",
    "flush",
    "init",
    "log",
    "log_hparams",
]

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


def __getattr__(name: str) -> Any:
    if name == "TrainerCallback":
        from starforge.report.hf import TrainerCallback

        return TrainerCallback
    raise AttributeError(f"module 'starforge.report' has no attribute {name!r}")
