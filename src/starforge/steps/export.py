"""``python -m starforge.steps.export``: a run's checkpoint as a Hugging Face model folder.

Runs inside a step run (``--then export``, ``sf export``); the command line is compiled by
:mod:`starforge.catalog.adapters.steps`. For ``trl/*`` the checkpoint is loaded with
``transformers`` and saved again as a model folder: safetensors weights, ``config.json``,
``generation_config.json``, the tokenizer (from the checkpoint, else from the base model), and a
``README.md`` model card recording provenance (run id, commit, method and version,
hyperparameters, data references with sha256, final metrics). For ``verl/*`` and ``nemo-rl/*``
the framework's own converter is run (:func:`~starforge.catalog.adapters.steps.converter_argv`).

The folder appears whole or not at all: everything is written into ``OUT.partial`` and renamed
into place, so a retried or killed export never leaves a half model where a reader looks. A
framework's converter is given ``OUT.partial`` before it exists and makes it itself: NeMo-RL's
``convert_dcp_to_hf.py`` refuses a folder that exists. It runs from the NeMo-RL checkout
(``$NEMO_RL_DIR``, ``uv run`` finds its environment there).
Exit codes: 0 exported, 2 no such checkpoint or bad arguments, 1 the conversion failed.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from starforge.catalog.adapters.steps import NEMO_RL_DIR, converter_argv

_CHECKPOINT = re.compile(r"(?:checkpoint-|global_step_|step_|step-)(\d+)")
HF_STATE = "trainer_state.json"


def find_checkpoint(folder: Path, step: int | None = None) -> Path | None:
    """The complete checkpoint with the highest step under ``folder`` (or exactly ``step``)."""
    found: list[tuple[int, Path]] = []
    for path in folder.rglob("*") if folder.is_dir() else []:
        match = _CHECKPOINT.fullmatch(path.name)
        if match is None or not path.is_dir():
            continue
        if path.name.startswith("checkpoint-") and not (path / HF_STATE).is_file():
            continue  # the Trainer writes its state last: without it the checkpoint is partial
        found.append((int(match.group(1)), path))
    if step is not None:
        found = [(s, p) for s, p in found if s == step]
    return max(found, key=lambda sp: sp[0])[1] if found else None


def _table(rows: dict[str, Any]) -> str:
    if not rows:
        return "(none)\n"
    lines = ["| name | value |", "|---|---|"]
    lines += [f"| `{k}` | `{json.dumps(v, default=str)}` |" for k, v in sorted(rows.items())]
    return "\n".join(lines) + "\n"


def model_card(card: dict[str, Any], checkpoint: Path) -> str:
    """The README.md of the exported folder: what the model is and where it came from."""
    data = card.get("data") or []
    data_lines = [
        f"- {d['name']}: `{d['value']}` ({d['kind']}"
        + (f", sha256 `{d['sha256']}`" if d.get("sha256") else "")
        + ")"
        for d in data
    ]
    base = card.get("base_model") or "unknown"
    commit = card.get("git_commit", "") + (
        " (with uncommitted changes)" if card.get("git_dirty") else ""
    )
    return (
        "---\n"
        f"library_name: transformers\nbase_model: {base}\n"
        f"tags: [starforge, {card.get('method', '')}]\n"
        "---\n\n"
        f"# {card.get('experiment', 'model')} ({card.get('run_id', '')})\n\n"
        f"Trained by StarForge run `{card.get('run_id', '')}` of project "
        f"`{card.get('project', '')}`, exported from checkpoint `{checkpoint.name}`.\n\n"
        "## Provenance\n\n"
        f"- run: `{card.get('run_id', '')}`\n"
        f"- commit: `{commit}`\n"
        f"- method: `{card.get('method', '')}` version `{card.get('method_version', '')}` "
        f"(framework `{card.get('framework_version', '')}`)\n"
        f"- base model: `{base}`\n\n"
        "## Data\n\n" + ("\n".join(data_lines) + "\n" if data_lines else "(none)\n") + "\n"
        "## Hyperparameters\n\n" + _table(card.get("hyperparams") or {}) + "\n"
        "## Final metrics\n\n" + _table(card.get("metrics") or {})
    )


def _save(obj: Any, target: Path) -> None:
    # transformers >= 5 always writes safetensors and no longer takes the flag.
    if "safe_serialization" in inspect.signature(obj.save_pretrained).parameters:
        obj.save_pretrained(target, safe_serialization=True)
    else:
        obj.save_pretrained(target)


def export_hf(checkpoint: Path, target: Path, card: dict[str, Any]) -> None:
    """Load a Trainer checkpoint and save it as a Hugging Face model folder at ``target``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(checkpoint)
    _save(model, target)
    if model.generation_config is not None:
        model.generation_config.save_pretrained(target)
    try:
        tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    except (OSError, ValueError):  # a checkpoint saved without its tokenizer: the base model's
        tokenizer = AutoTokenizer.from_pretrained(card.get("base_model_location") or "")
    tokenizer.save_pretrained(target)


def convert(framework: str, checkpoint: Path, target: Path, subdir: str = "") -> int:
    """Run the framework's own converter into ``target`` (which it creates); its exit code."""
    nemo_dir = os.environ.get("NEMO_RL_DIR", "")
    argv = converter_argv(framework, str(checkpoint), str(target), nemo_dir=nemo_dir, subdir=subdir)
    cwd = (nemo_dir or NEMO_RL_DIR) if framework == "nemo-rl" else None
    print("export: running " + " ".join(argv), flush=True)
    return subprocess.call(argv, cwd=cwd)


def run(args: argparse.Namespace) -> int:
    card = json.loads(Path(args.card).read_text()) if args.card else {}
    checkpoint = find_checkpoint(Path(args.checkpoints), args.step)
    if checkpoint is None:
        which = f"step {args.step}" if args.step is not None else "a complete checkpoint"
        print(f"export: no {which} under {args.checkpoints}", file=sys.stderr)
        return 2
    out = Path(args.out)
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)  # a killed earlier attempt's leftovers
    partial.parent.mkdir(parents=True, exist_ok=True)
    print(f"export: {checkpoint} -> {out} ({args.framework}, {args.format})", flush=True)
    if args.framework == "trl":
        partial.mkdir()
        export_hf(checkpoint, partial, card)
    else:
        code = convert(args.framework, checkpoint, partial, args.subdir)
        if code != 0:
            print(f"export: the converter exited with code {code}", file=sys.stderr)
            return 1
        if not partial.is_dir():
            print(f"export: the converter wrote nothing at {partial}", file=sys.stderr)
            return 1
    (partial / "README.md").write_text(model_card(card, checkpoint))
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)
    print(f"export: wrote {out}", flush=True)
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m starforge.steps.export")
    p.add_argument("--framework", default="trl", choices=["trl", "verl", "nemo-rl"])
    p.add_argument("--checkpoints", required=True, help="the trained run's checkpoints folder")
    p.add_argument("--out", required=True, help="where the model folder goes")
    p.add_argument("--card", default="", help="the model card's provenance (JSON)")
    p.add_argument("--format", default="huggingface", choices=["huggingface"])
    p.add_argument("--step", type=int, default=None, help="this checkpoint step (default: last)")
    p.add_argument("--subdir", default="", help="the model's folder in a checkpoint (verl: actor)")
    return p


def main(argv: list[str] | None = None) -> int:
    return run(parser().parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
