"""``TrainerCallback`` for Hugging Face / TRL trainers: every logged value becomes a curve.

On the main process only (``state.is_world_process_zero``): at the start of training the
trainer's resolved arguments are recorded as hyperparameters; each ``on_log`` sends the numeric
values at ``state.global_step`` (so a resumed run re-logs the steps after its checkpoint and
replaces them), and a resumed run first sends again what its checkpoint's log history holds, so
the points an attempt logged just before it died (a lost node, a kill) are never missing from the
curves; the end-of-training summary (``train_runtime``, ``train_loss``, ...) goes to the
run's metadata instead of becoming one-point curves; the end of training flushes.
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback as _HFCallback

from starforge.report.run import Run
from starforge.report.session import current, init

SUMMARY_KEYS = frozenset(
    {
        "train_runtime",
        "train_samples_per_second",
        "train_steps_per_second",
        "total_flos",
        "train_loss",
    }
)


class TrainerCallback(_HFCallback):
    """Send the trainer's logs to ``starforge.report`` (a no-op outside a StarForge job)."""

    def __init__(self, run: Run | None = None) -> None:
        self._run = run

    def _session(self) -> Run:
        return self._run or current() or init()

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not state.is_world_process_zero:
            return
        try:
            params = args.to_dict()
        except Exception:  # a custom args object: keep what is readable
            params = {k: v for k, v in vars(args).items() if not k.startswith("_")}
        session = self._session()
        session.log_hparams(params)
        for entry in state.log_history if state.global_step > 0 else []:
            step = entry.get("step")
            values = {k: v for k, v in entry.items() if k != "step" and k not in SUMMARY_KEYS}
            if isinstance(step, int) and values:
                session.log(values, step=step)

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any
    ) -> None:
        if not state.is_world_process_zero or not logs:
            return
        summary = {k: v for k, v in logs.items() if k in SUMMARY_KEYS}
        values = {k: v for k, v in logs.items() if k not in SUMMARY_KEYS}
        session = self._session()
        if summary:
            session.log_meta({"summary": summary, "steps": state.global_step})
        if values:
            session.log(values, step=state.global_step)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.is_world_process_zero:
            self._session().flush()
