"""SFT with TRL, as the StarForge runner runs it (cwd = this experiment's folder).

Reads FORGE_CONFIG (the SFTConfig arguments the platform composed, output_dir included; without
it, config.yaml next to this file and output_dir = $FORGE_OUT_DIR/checkpoints), FORGE_MODEL,
FORGE_TRAIN_DATA / FORGE_VALIDATION_DATA (JSONL or Parquet: ``prompt`` + ``completion``,
``text`` or ``messages`` columns), FORGE_OUT_DIR, FORGE_RESUME_FROM. Prints ``[config] {json}``
(the arguments given to SFTConfig), then ``[metrics] {json}`` per step (``[eval]`` for
evaluations); writes checkpoints to output_dir, then the model to $FORGE_OUT_DIR/final and
summary.json (also printed as ``[summary] {json}``). Exit: 0 done, 2 bad input, 143 SIGTERM.

The run's plumbing (inputs, ranks, the stop on SIGTERM, log lines, resuming, the report to
StarForge) is trl_support.py's, beside this file: what every trl template shares.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from transformers import TrainerState
from trl_support import Job, fail, load_rows


def load_examples(path: Path, text_field: str) -> Any:
    dataset = load_rows(path)
    columns = set(dataset.column_names)
    if not ({"prompt", "completion"} <= columns or text_field in columns or "messages" in columns):
        fail(
            f"{path}: expected 'prompt' and 'completion', '{text_field}' or 'messages' columns "
            f"(columns: {', '.join(dataset.column_names)})"
        )
    return dataset


# What a log line shows; every logged value is kept in each checkpoint's trainer_state.json.
SHOWN = ("loss", "mean_token_accuracy", "entropy", "num_tokens", "grad_norm", "learning_rate")


def summarize(state: TrainerState) -> dict[str, Any]:
    losses = [e["loss"] for e in state.log_history if "loss" in e]
    return {
        "steps": state.global_step,
        "first_loss": losses[0] if losses else None,
        "final_loss": losses[-1] if losses else None,
    }


def main() -> int:
    job = Job.start("SFTConfig")  # the stop handler first, then the inputs, checked

    from trl import SFTConfig, SFTTrainer  # after the checks: importing TRL takes seconds

    config = job.config(SFTConfig)
    resume, finished = job.resume_point(config)
    text_field = config.dataset_text_field
    trainer = SFTTrainer(
        model=str(resume) if finished else job.model,
        args=config,
        train_dataset=load_examples(job.train_path, text_field),
        eval_dataset=load_examples(job.val_path, text_field) if job.val_path else None,
        callbacks=job.callbacks(SHOWN),
    )
    return job.run(trainer, resume, finished, summarize)


if __name__ == "__main__":
    sys.exit(main())
