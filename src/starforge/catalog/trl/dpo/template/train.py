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
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import sys
from pathlib import Path
from typing import Any, NoReturn

import yaml
from transformers import PrinterCallback, TrainerCallback, TrainerState

HERE = Path(__file__).resolve().parent
EXIT_BAD_INPUT = 2
EXIT_SIGTERM = 143
PR_SET_PDEATHSIG = 1  # prctl(2)
DATA_FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}


def fail(message: str) -> NoReturn:
    print(f"train.py: error: {' '.join(message.split())}", file=sys.stderr)
    sys.exit(EXIT_BAD_INPUT)


def distributed() -> tuple[int, int]:
    """(global rank, world size) as torchrun set them; (0, 1) for a run of one process. Each
    rank of several says them first, and is tied to its launcher's life."""
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        node = os.environ.get("GROUP_RANK", os.environ.get("NODE_RANK", "0"))
        local = os.environ.get("LOCAL_RANK", "0")
        print(f"[dist] world_size={world} rank={rank} local_rank={local} node_rank={node}")
        sys.stdout.flush()
        die_with_launcher()
    return rank, world


def die_with_launcher() -> None:
    """torchrun starts each rank in a session of its own, out of reach of a SIGKILL sent to the
    launcher's process group (a stop past its grace, a lost node): have the kernel end this rank
    when its launcher dies, so no rank outlives its run."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the launcher's own shutdown is all there is
        return
    if os.getppid() == 1:  # the launcher died before the request took effect
        sys.exit(EXIT_SIGTERM)


def any_rank(flag: bool, args: Any) -> bool:
    """Whether ``flag`` is set on any rank. Ranks must stop at the same step: one that stopped
    alone would leave the others waiting for it in their next collective."""
    import torch
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized() or dist.get_world_size() == 1:
        return flag
    votes = torch.tensor([1 if flag else 0], device=args.device)
    dist.all_reduce(votes, op=dist.ReduceOp.MAX)
    return bool(votes.item())


def input_path(name: str, *, required: bool) -> Path | None:
    """The existing file or folder a variable points to (None if unset and optional)."""
    value = os.environ.get(name, "")
    if not value:
        if required:
            fail(f"{name} is not set")
        return None
    path = Path(value).expanduser()
    if not path.exists():
        fail(f"{name}={value}: no such file or folder")
    return path


def model_location() -> str:
    """FORGE_MODEL as given: an existing folder, or else something that reads as a hub id."""
    value = os.environ.get("FORGE_MODEL") or fail("FORGE_MODEL is not set")
    if Path(value).expanduser().exists():
        return str(Path(value).expanduser())
    if value.startswith(("/", ".", "~")) or not re.fullmatch(r"[\w.-]+(/[\w.-]+)?", value):
        fail(f"FORGE_MODEL={value}: no such folder (and not a hub id)")
    return value  # a hub id; works offline only if it is in the HF cache


def load_settings(out_dir: Path) -> tuple[dict[str, Any], str]:
    """The DPOConfig arguments and their source: $FORGE_CONFIG (composed by the platform:
    overrides applied, output_dir set) or, in a run by hand, config.yaml next to this file."""
    given = os.environ.get("FORGE_CONFIG", "")
    source = f"FORGE_CONFIG={given}" if given else "config.yaml"
    try:
        settings = yaml.safe_load(Path(given or HERE / "config.yaml").read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        fail(f"{source}: cannot read it: {exc}")
    if not isinstance(settings, dict):
        fail(f"{source} must be a mapping of DPOConfig arguments")
    if given:
        settings.setdefault("output_dir", str(out_dir / "checkpoints"))
        return settings, source
    if "defaults" in settings:
        fail("config.yaml inherits with 'defaults:', which only the platform composes")
    if "output_dir" in settings:
        fail("output_dir is set by the platform ($FORGE_OUT_DIR/checkpoints); remove it")
    settings["output_dir"] = str(out_dir / "checkpoints")
    return settings, source


def load_pairs(path: Path) -> Any:
    from datasets import load_dataset

    kind = DATA_FORMATS.get(path.suffix.lower())
    if kind is None:
        fail(f"{path}: expected one of {', '.join(DATA_FORMATS)}")
    dataset = load_dataset(kind, data_files=str(path), split="train")
    missing = [c for c in ("chosen", "rejected") if c not in dataset.column_names]
    if missing:
        fail(
            f"{path}: no {' or '.join(repr(c) for c in missing)} column "
            f"(columns: {', '.join(dataset.column_names)})"
        )
    return dataset


def latest_checkpoint(folder: Path) -> Path | None:
    """The complete checkpoint-<N> with the highest N (numeric, not name order)."""
    found = [
        (int(p.name.split("-", 1)[1]), p)
        for p in folder.glob("checkpoint-*")
        if re.fullmatch(r"checkpoint-\d+", p.name) and (p / "trainer_state.json").is_file()
    ]
    return max(found)[1] if found else None


def steps_in(checkpoint: Path) -> int:
    """The global step a checkpoint was saved at (0 if it has no trainer state)."""
    state = checkpoint / "trainer_state.json"
    return int(json.loads(state.read_text())["global_step"]) if state.is_file() else 0


class SigtermStop(TrainerCallback):
    """On SIGTERM: finish the current step, save a checkpoint, stop training."""

    def __init__(self) -> None:
        self.requested = False
        signal.signal(signal.SIGTERM, self._on_signal)

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.requested = True  # no printing here: the main thread may be mid-write to stdout

    def on_step_end(self, args: Any, state: TrainerState, control: Any, **kw: Any) -> None:
        if any_rank(self.requested, args):  # every rank saves and stops at this step
            self.requested = True
            print(f"[signal] SIGTERM: saving checkpoint-{state.global_step} and stopping")
            control.should_save = True
            control.should_training_stop = True


# What a log line shows; every logged value is kept in each checkpoint's trainer_state.json.
REWARDS = ("rewards/accuracies", "rewards/margins", "rewards/chosen", "rewards/rejected")
SHOWN = ("loss", *REWARDS, "grad_norm", "learning_rate")


class PrintMetrics(TrainerCallback):
    """Prints each log as one compact JSON line: ``[metrics]`` for steps, ``[eval]`` for evals."""

    def on_log(
        self, args: Any, state: TrainerState, control: Any, logs: Any = None, **kw: Any
    ) -> None:
        logs = logs or {}
        if not state.is_world_process_zero:  # one trajectory: rank 0 says it
            return
        if "train_runtime" in logs:  # the end-of-training summary, not a step
            return
        is_eval = any(k.startswith("eval_") for k in logs)
        keys = [f"eval_{k}" for k in SHOWN] if is_eval else SHOWN
        values = {k: round(logs[k], 6) for k in keys if isinstance(logs.get(k), int | float)}
        line = json.dumps({"step": state.global_step, **values}, separators=(",", ":"))
        print(f"{'[eval]' if is_eval else '[metrics]'} {line}", flush=True)


def platform_callbacks() -> list[TrainerCallback]:
    """starforge.report's callback: every logged value becomes a curve of the run (hyperparameters
    and the final summary too). Outside a StarForge job it does nothing; an image without the SDK
    trains without it."""
    try:
        from starforge.report import TrainerCallback as ReportToStarForge
    except ImportError:
        return []
    return [ReportToStarForge()]


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


def quiet_libraries() -> None:
    """Progress bars and library deprecation notices would drown the training steps in the log."""
    import warnings

    import datasets
    import transformers

    datasets.disable_progress_bars()
    transformers.utils.logging.disable_progress_bar()
    warnings.filterwarnings("ignore", category=FutureWarning, module="transformers")
    warnings.filterwarnings("ignore", category=FutureWarning, module="trl")


def main() -> int:
    stop = SigtermStop()  # first, so that a stop during the slow start-up is not lost
    rank, world = distributed()
    model = model_location()
    train_path = input_path("FORGE_TRAIN_DATA", required=True)
    val_path = input_path("FORGE_VALIDATION_DATA", required=False)
    out_dir = Path(os.environ.get("FORGE_OUT_DIR") or fail("FORGE_OUT_DIR is not set"))
    out_dir.mkdir(parents=True, exist_ok=True)
    resume_from = input_path("FORGE_RESUME_FROM", required=False)
    settings, source = load_settings(out_dir)

    import torch
    from trl import DPOConfig, DPOTrainer  # after the checks: importing TRL takes seconds

    quiet_libraries()
    if world > 1 and (settings.get("use_cpu") or not torch.cuda.is_available()):
        settings.setdefault("ddp_backend", "gloo")  # NCCL needs GPUs

    unknown = sorted(set(settings) - {f.name for f in dataclasses.fields(DPOConfig)})
    if unknown:
        fail(f"unknown DPOConfig argument(s) in {source}: {unknown}")
    if val_path is None:
        settings["eval_strategy"] = "no"
    try:
        config = DPOConfig(**settings)
    except (TypeError, ValueError) as exc:
        fail(f"invalid DPOConfig: {exc}")
    if rank == 0:
        line = json.dumps(settings, separators=(",", ":"), sort_keys=True, default=str)
        print(f"[config] {line}")

    checkpoints = Path(config.output_dir)
    resume = resume_from or latest_checkpoint(checkpoints)
    # Resumed from a checkpoint that already has max_steps, Trainer would run one step more.
    finished = resume is not None and 0 < config.max_steps <= steps_in(resume)
    # Given a path (never a loaded model), DPOTrainer loads the policy, the frozen reference
    # model and the tokenizer from it; on resume the reference is again the base model.
    trainer = DPOTrainer(
        model=str(resume) if finished else model,
        args=config,
        train_dataset=load_pairs(train_path),
        eval_dataset=load_pairs(val_path) if val_path else None,
        callbacks=[PrintMetrics(), stop, *platform_callbacks()],
    )
    trainer.remove_callback(PrinterCallback)  # it prints each log again as a Python dict
    if any_rank(stop.requested, config):  # the process group exists once the trainer does
        print("[stopped] before the first step; nothing to save")
        return EXIT_SIGTERM
    if finished:
        print(f"[start] {resume} already has all {config.max_steps} steps; exporting it")
        trainer.state = TrainerState.load_from_json(str(Path(resume, "trainer_state.json")))
    else:
        # Every rank says where it starts from: all of them from the same checkpoint.
        print(f"[start] model={model} resume_from={resume or '-'} max_steps={config.max_steps}")
        trainer.train(resume_from_checkpoint=str(resume) if resume else None)

    if stop.requested:
        print(f"[stopped] at step {trainer.state.global_step}; checkpoint in {checkpoints}")
        return EXIT_SIGTERM
    trainer.save_model(str(out_dir / "final"))
    if rank != 0:  # the model was saved by rank 0 (every rank takes part in the save)
        return 0
    summary = summarize(trainer.state)
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"[summary] {json.dumps(summary, separators=(',', ':'))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
