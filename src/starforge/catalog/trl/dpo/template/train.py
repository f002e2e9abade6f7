"""DPO training with TRL, as the StarForge runner runs it (cwd = this experiment's folder).

Reads FORGE_CONFIG (the DPOConfig arguments the platform composed, output_dir included; without
it, config.yaml next to this file and output_dir = $FORGE_OUT_DIR/checkpoints), FORGE_MODEL
(also the frozen reference model), FORGE_TRAIN_DATA / FORGE_VALIDATION_DATA (JSONL or Parquet:
``chosen`` and ``rejected`` columns, usually ``prompt`` too), FORGE_OUT_DIR, FORGE_RESUME_FROM.
Prints ``[config] {json}`` (the arguments given to DPOConfig), then ``[metrics] {json}`` per step
(``[eval]`` for evaluations; every logged value also goes to the run's curves through
``starforge.report``); writes checkpoints to output_dir, then the model to
$FORGE_OUT_DIR/final and summary.json (also printed as ``[summary] {json}``). Exit: 0 done,
2 bad input, 143 stopped by SIGTERM.

The run's plumbing (inputs, ranks, the stop on SIGTERM, log lines, resuming, the report to
StarForge) is trl_support.py's, beside this file: what every trl template shares.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from transformers import TrainerState
from trl_support import Job, fail, load_rows


def load_pairs(path: Path) -> Any:
    dataset = load_rows(path)
    missing = [c for c in ("chosen", "rejected") if c not in dataset.column_names]
    if missing:
        fail(
            f"{path}: no {' or '.join(repr(c) for c in missing)} column "
            f"(columns: {', '.join(dataset.column_names)})"
        )
    return dataset


# What a log line shows; every logged value is kept in each checkpoint's trainer_state.json.
REWARDS = ("rewards/accuracies", "rewards/margins", "rewards/chosen", "rewards/rejected")
SHOWN = ("loss", *REWARDS, "grad_norm", "learning_rate")


def summarize(state: TrainerState) -> dict[str, Any]:
    losses = [e["loss"] for e in state.log_history if "loss" in e]
    # The share of validation pairs where "chosen" gained more over the reference than "rejected".
    key = "eval_rewards/accuracies"
    accuracies = [e[key] for e in state.log_history if key in e]
    return {
        "steps": state.global_step,
        "first_loss": losses[0] if losses else None,
        "final_loss": losses[-1] if losses else None,
        "final_eval_accuracy": accuracies[-1] if accuracies else None,  # None: no evaluation
    }


def main() -> int:
    job = Job.start("DPOConfig")  # the stop handler first, then the inputs, checked

    from trl import DPOConfig, DPOTrainer  # after the checks: importing TRL takes seconds

    config = job.config(DPOConfig)
    resume, finished = job.resume_point(config)
    # Given a path (never a loaded model), DPOTrainer loads the policy, the frozen reference
    # model and the tokenizer from it; on resume the reference is again the base model.
    trainer = DPOTrainer(
        model=str(resume) if finished else job.model,
        args=config,
        train_dataset=load_pairs(job.train_path),
        eval_dataset=load_pairs(job.val_path) if job.val_path else None,
        callbacks=job.callbacks(SHOWN),
    )
    return job.run(trainer, resume, finished, summarize)


if __name__ == "__main__":
    sys.exit(main())
