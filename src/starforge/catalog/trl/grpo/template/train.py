"""GRPO training with TRL, as the StarForge runner runs it (cwd = this experiment's folder).

Reads FORGE_CONFIG (the GRPOConfig arguments the platform composed, output_dir included;
without it, config.yaml next to this file and output_dir = $FORGE_OUT_DIR/checkpoints),
FORGE_MODEL, FORGE_TRAIN_DATA / FORGE_VALIDATION_DATA (JSONL or Parquet, ``prompt`` column),
FORGE_OUT_DIR, FORGE_RESUME_FROM. Prints ``[config] {json}`` (the arguments given to
GRPOConfig), then ``[metrics] {json}`` per step (``[eval]`` for evaluations; every logged
value also goes to the run's curves through ``starforge.report``); writes checkpoints
to output_dir, then the model to $FORGE_OUT_DIR/final and summary.json (also printed as
``[summary] {json}``). Exit codes: 0 done, 2 bad input, 143 stopped by SIGTERM.

The run's plumbing (inputs, ranks, the stop on SIGTERM, log lines, resuming, the report to
StarForge) is trl_support.py's, beside this file: what every trl template shares.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from transformers import TrainerState
from trl_support import Job, fail, load_rows


def load_prompts(path: Path) -> Any:
    dataset = load_rows(path)
    if "prompt" not in dataset.column_names:
        fail(f"{path}: no 'prompt' column (columns: {', '.join(dataset.column_names)})")
    return dataset


# What a log line shows; every logged value is kept in each checkpoint's trainer_state.json.
SHOWN = ("loss", "reward", "reward_std", "entropy", "grad_norm", "learning_rate", "step_time")


def summarize(state: TrainerState) -> dict[str, Any]:
    rewards = [e["reward"] for e in state.log_history if "reward" in e]
    return {
        "steps": state.global_step,
        "first_reward": rewards[0] if rewards else None,
        "final_reward": rewards[-1] if rewards else None,
        "max_reward": max(rewards) if rewards else None,
    }


def main() -> int:
    job = Job.start("GRPOConfig")  # the stop handler first, then the inputs, checked

    from reward import REWARD_FUNCS
    from trl import GRPOConfig, GRPOTrainer  # after the checks: importing TRL takes seconds

    config = job.config(GRPOConfig)
    resume, finished = job.resume_point(config)
    trainer = GRPOTrainer(
        model=str(resume) if finished else job.model,
        reward_funcs=REWARD_FUNCS,
        args=config,
        train_dataset=load_prompts(job.train_path),
        eval_dataset=load_prompts(job.val_path) if job.val_path else None,
        callbacks=job.callbacks(SHOWN),
    )
    return job.run(trainer, resume, finished, summarize)


if __name__ == "__main__":
    sys.exit(main())
