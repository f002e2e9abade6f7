"""What every trl template's ``train.py`` and ``prepare.py`` share, next to them in the experiment.

``sf new`` copies this file from StarForge's catalog (``catalog/trl/shared/``) beside the
template's scripts, so an experiment stays standalone: ``python train.py``, torchrun and the
runner's fork all put the script's folder first on ``sys.path``, and ``from trl_support import
...`` finds this copy. It owns the run's plumbing: the inputs the runner gives (``FORGE_*``), the
distributed setup (each rank tied to its launcher's life, ranks agreeing before they stop), the
stop on SIGTERM with a checkpoint, the log lines (``[config]``, ``[metrics]``, ``[eval]``,
``[summary]``), resuming from the newest checkpoint, the report to StarForge (``starforge.report``
when the image has it; a run without it trains the same), and the demo's tiny model. What differs
per method (its trainer, its data's columns, its summary) stays in ``train.py``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import signal
import string
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import yaml
from transformers import PrinterCallback, TrainerCallback, TrainerState

HERE = Path(__file__).resolve().parent  # the experiment's folder
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


def load_settings(out_dir: Path, kind: str) -> tuple[dict[str, Any], str]:
    """The ``kind`` (e.g. SFTConfig) arguments and their source: $FORGE_CONFIG (composed by the
    platform: overrides applied, output_dir set) or, in a run by hand, config.yaml beside this."""
    given = os.environ.get("FORGE_CONFIG", "")
    source = f"FORGE_CONFIG={given}" if given else "config.yaml"
    try:
        settings = yaml.safe_load(Path(given or HERE / "config.yaml").read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        fail(f"{source}: cannot read it: {exc}")
    if not isinstance(settings, dict):
        fail(f"{source} must be a mapping of {kind} arguments")
    if given:
        settings.setdefault("output_dir", str(out_dir / "checkpoints"))
        return settings, source
    if "defaults" in settings:
        fail("config.yaml inherits with 'defaults:', which only the platform composes")
    if "output_dir" in settings:
        fail("output_dir is set by the platform ($FORGE_OUT_DIR/checkpoints); remove it")
    settings["output_dir"] = str(out_dir / "checkpoints")
    return settings, source


def load_rows(path: Path) -> Any:
    """A JSONL or Parquet file as a ``datasets`` Dataset (the caller checks its columns)."""
    from datasets import load_dataset

    kind = DATA_FORMATS.get(path.suffix.lower())
    if kind is None:
        fail(f"{path}: expected one of {', '.join(DATA_FORMATS)}")
    return load_dataset(kind, data_files=str(path), split="train")


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


class PrintMetrics(TrainerCallback):
    """Prints each log as one compact JSON line: ``[metrics]`` for steps, ``[eval]`` for evals,
    with the values ``shown`` (every logged value is kept in each checkpoint's
    trainer_state.json)."""

    def __init__(self, shown: Sequence[str]) -> None:
        self.shown = tuple(shown)

    def on_log(
        self, args: Any, state: TrainerState, control: Any, logs: Any = None, **kw: Any
    ) -> None:
        logs = logs or {}
        if not state.is_world_process_zero:  # one trajectory: rank 0 says it
            return
        if "train_runtime" in logs:  # the end-of-training summary, not a step
            return
        is_eval = any(k.startswith("eval_") for k in logs)
        keys = [f"eval_{k}" for k in self.shown] if is_eval else self.shown
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


def quiet_libraries() -> None:
    """Progress bars and library deprecation notices would drown the training steps in the log."""
    import warnings

    import datasets
    import transformers

    datasets.disable_progress_bars()
    transformers.utils.logging.disable_progress_bar()
    warnings.filterwarnings("ignore", category=FutureWarning, module="transformers")
    warnings.filterwarnings("ignore", category=FutureWarning, module="trl")


@dataclass
class Job:
    """One training as the runner started it: its inputs, checked, and its stop request."""

    stop: SigtermStop
    rank: int
    world: int
    model: str
    train_path: Path
    val_path: Path | None
    out_dir: Path
    resume_from: Path | None
    settings: dict[str, Any]
    source: str  # where the settings came from, for error messages

    @classmethod
    def start(cls, kind: str) -> Job:
        """The job's inputs, checked before the slow imports; ``kind`` names the trainer's
        arguments class (e.g. SFTConfig) in messages."""
        stop = SigtermStop()  # first, so that a stop during the slow start-up is not lost
        rank, world = distributed()
        model = model_location()
        train_path = input_path("FORGE_TRAIN_DATA", required=True)
        assert train_path is not None  # required: fail() ended the run otherwise
        val_path = input_path("FORGE_VALIDATION_DATA", required=False)
        out_dir = Path(os.environ.get("FORGE_OUT_DIR") or fail("FORGE_OUT_DIR is not set"))
        out_dir.mkdir(parents=True, exist_ok=True)
        resume_from = input_path("FORGE_RESUME_FROM", required=False)
        settings, source = load_settings(out_dir, kind)
        return cls(
            stop, rank, world, model, train_path, val_path, out_dir, resume_from, settings, source
        )

    def config(self, config_class: type) -> Any:
        """The trainer's arguments (``config_class``, e.g. trl.SFTConfig) from the settings,
        printed as ``[config]`` by rank 0; an unknown or invalid argument fails the job."""
        import torch

        quiet_libraries()
        settings, kind = self.settings, config_class.__name__
        if self.world > 1 and (settings.get("use_cpu") or not torch.cuda.is_available()):
            settings.setdefault("ddp_backend", "gloo")  # NCCL needs GPUs
        unknown = sorted(set(settings) - {f.name for f in dataclasses.fields(config_class)})
        if unknown:
            fail(f"unknown {kind} argument(s) in {self.source}: {unknown}")
        if self.val_path is None:
            settings["eval_strategy"] = "no"
        try:
            config = config_class(**settings)
        except (TypeError, ValueError) as exc:
            fail(f"invalid {kind}: {exc}")
        if self.rank == 0:
            line = json.dumps(settings, separators=(",", ":"), sort_keys=True, default=str)
            print(f"[config] {line}")
        return config

    def resume_point(self, config: Any) -> tuple[Path | None, bool]:
        """The checkpoint to start from (FORGE_RESUME_FROM, else the newest in output_dir) and
        whether it already has every step (then it is exported, not trained further)."""
        resume = self.resume_from or latest_checkpoint(Path(config.output_dir))
        # Resumed from a checkpoint that already has max_steps, Trainer would run one step more.
        finished = resume is not None and 0 < config.max_steps <= steps_in(resume)
        return resume, finished

    def callbacks(self, shown: Sequence[str]) -> list[TrainerCallback]:
        """The trainer's callbacks: the log lines (``shown`` values), the stop, the report."""
        return [PrintMetrics(shown), self.stop, *platform_callbacks()]

    def run(
        self,
        trainer: Any,
        resume: Path | None,
        finished: bool,
        summarize: Callable[[TrainerState], dict[str, Any]],
    ) -> int:
        """Train (or, ``finished``, only load the state), save the model to $FORGE_OUT_DIR/final
        and, on rank 0, write summary.json; the job's exit code (143 when stopped)."""
        config = trainer.args
        checkpoints = Path(config.output_dir)
        trainer.remove_callback(PrinterCallback)  # it prints each log again as a Python dict
        if any_rank(self.stop.requested, config):  # the process group exists once the trainer does
            print("[stopped] before the first step; nothing to save")
            return EXIT_SIGTERM
        if finished:
            print(f"[start] {resume} already has all {config.max_steps} steps; exporting it")
            trainer.state = TrainerState.load_from_json(str(Path(resume, "trainer_state.json")))
        else:
            # Every rank says where it starts from: all of them from the same checkpoint.
            where = f"model={self.model} resume_from={resume or '-'}"
            print(f"[start] {where} max_steps={config.max_steps}")
            trainer.train(resume_from_checkpoint=str(resume) if resume else None)

        if self.stop.requested:
            print(f"[stopped] at step {trainer.state.global_step}; checkpoint in {checkpoints}")
            return EXIT_SIGTERM
        trainer.save_model(str(self.out_dir / "final"))
        if self.rank != 0:  # the model was saved by rank 0 (every rank takes part in the save)
            return 0
        summary = summarize(trainer.state)
        (self.out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        print(f"[summary] {json.dumps(summary, separators=(',', ':'))}")
        return 0


# prepare.py: the demo's inputs, built offline.

SPECIAL_TOKENS = ["<pad>", "<bos>", "<eos>", "<unk>"]
# One token per printable ASCII character, plus space and newline: 100 tokens in all.
ALPHABET = list(string.ascii_letters + string.digits + string.punctuation + " \n")
SEED = 0


def build_model(target: Path) -> None:
    """Save a random tiny Llama and its character tokenizer (built in code, so nothing is
    downloaded) to ``target``."""
    import torch
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import AutoModelForCausalLM, LlamaConfig, PreTrainedTokenizerFast
    from transformers.utils import logging

    logging.disable_progress_bar()  # the "Writing model shards" bar

    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS + ALPHABET)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    # Split every character into its own token ([\s\S]: Oniguruma has no (?s) flag).
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
        padding_side="left",
    )
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(SEED)
    model = AutoModelForCausalLM.from_config(config)
    target.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)
    params = sum(p.numel() for p in model.parameters())
    print(f"wrote {target}/ (random Llama, {params:,} parameters, {len(tokenizer)} tokens)")


def write_jsonl(path: Path, rows: list[dict[str, str]], unit: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    print(f"wrote {path} ({len(rows)} {unit})")


def prepare(
    description: str,
    files: dict[str, list[dict[str, str]]],
    unit: str = "rows",
) -> None:
    """prepare.py's command line (``[--lab DIR] [--force]``): the tiny model in
    ``models/tiny-llama/`` and each of ``files`` (name: rows) in ``data/`` under the lab root
    (default: the folder that holds ``experiments/``), keeping what exists unless ``--force``."""
    parser = argparse.ArgumentParser(description=description)
    default_lab = HERE.parents[1]
    parser.add_argument(
        "--lab", type=Path, default=default_lab, help="lab root (default: %(default)s)"
    )
    parser.add_argument("--force", action="store_true", help="rebuild what already exists")
    args = parser.parse_args()
    lab: Path = args.lab.resolve()

    model_dir = lab / "models" / "tiny-llama"
    if args.force or not (model_dir / "config.json").is_file():
        build_model(model_dir)
    else:
        print(f"kept {model_dir}/ (exists; --force rebuilds it)")

    for name, rows in files.items():
        path = lab / "data" / name
        if args.force or not path.is_file():
            write_jsonl(path, rows, unit)
        else:
            print(f"kept {path} (exists; --force rewrites it)")
