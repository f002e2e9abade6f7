"""``starforge.report``: curves, hyperparameters and metadata from inside a training job.

    import starforge.report as report

    report.init(hparams={"lr": 1e-5, "model": "qwen"})   # optional: log() starts it too
    for step in range(steps):
        report.log({"loss": loss, "eval": {"acc": acc}}, step=step)   # -> loss, eval/acc
    report.finish()                                        # optional: runs at exit anyway

The platform sets the job's environment (run id, ingest endpoint, run-scoped token); without it
(a script run by hand) every call is a silent no-op. ``log`` never raises into training and never
waits for the network: a background thread batches and sends. Points logged while the server is
unreachable are kept (in memory, then in a spool file under ``$FORGE_OUT_DIR``) and sent later:
by this process, by its runner once the job has ended, or, what is still there when the run
ends, by the server itself; none is stored twice. ``finish`` drains, and runs by itself at exit.

For Hugging Face / TRL trainers, ``trainer.add_callback(report.TrainerCallback())`` sends every
value the trainer logs; the ``trl/*`` catalog methods are wired with it already.

Only the standard library, httpx and pydantic are used (through :mod:`starforge.client`), so this
runs in any training image; ``TrainerCallback`` imports ``transformers`` only when it is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starforge.report.run import Run
from starforge.report.session import current, finish, flush, init, log, log_hparams

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


def __getattr__(name: str) -> Any:
    if name == "TrainerCallback":
        from starforge.report.hf import TrainerCallback

        return TrainerCallback
    raise AttributeError(f"module 'starforge.report' has no attribute {name!r}")
