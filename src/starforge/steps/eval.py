"""EVAL: method-native evaluation of a Hugging Face model folder on validation data.

    python -m starforge.steps.eval --model DIR --method trl/sft --config CONFIG.yaml \\
        --data val.jsonl --out report.json [--exp-dir DIR] [--ref-model DIR] [--step N]

What each method's eval measures (the metric names :data:`starforge.steps.gate.EVAL_METRICS`
lists, so admission can refuse a gate on a metric that is never produced):

- ``trl/sft``: ``loss``, the mean token negative log-likelihood of the completions (of the whole
  text for ``text`` / ``messages`` rows), ``perplexity`` = exp(loss), and ``tokens`` counted;
- ``trl/dpo``: ``accuracy``, the share of pairs whose implicit reward prefers ``chosen``;
  ``margin``, the mean reward margin beta·((log π(c) − log π(r)) − (log π_ref(c) − log π_ref(r)));
  ``loss``, the sigmoid DPO loss −log σ(margin), with ``beta`` from the config. The reference
  is ``--ref-model``, else, inside a job, the run's starting model (``$FORGE_MODEL``, when it is
  a folder: the model DPO trained away from, as TRL's own eval uses); without either the
  reference terms are 0 (a reference-free margin);
- ``trl/grpo``: ``reward``, the experiment's reward functions (``REWARD_FUNCS`` of its
  ``reward.py``, weighted by ``reward_weights``) averaged over ``num_generations`` sampled
  completions per prompt (``max_completion_length``, ``temperature``, ``top_p``, ``seed`` from
  the config); ``reward_std``; and ``rewards/<function>`` per function.

Writes the report (JSON: ``metrics``, ``n``, the model, the data's sha256, the gate's verdict)
atomically to ``--out`` and sends the metrics as ``eval/<name>`` through :mod:`starforge.report`
(a no-op outside a job), so they appear in ``sf job metrics``. Exit status: 0 done (gate passed
or none), 2 bad input, 3 (:data:`~starforge.steps.gate.EXIT_GATE_FAILED`) the gate failed —
the reason is printed and recorded in the report. torch and transformers are imported only
once the inputs are checked.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

import yaml

from starforge.contract.atomic import write_json_atomic
from starforge.contract.errors import ConfigError
from starforge.steps.gate import EVAL_METRICS, EXIT_GATE_FAILED, gate_of, judge

EXIT_BAD_INPUT = 2
DATA_SUFFIXES = (".jsonl", ".json", ".parquet")
REWARD_FILE = "reward.py"


def fail(message: str) -> NoReturn:
    print(f"eval: error: {' '.join(message.split())}", file=sys.stderr)
    sys.exit(EXIT_BAD_INPUT)


# ---- inputs -----------------------------------------------------------------------------------


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def load_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a JSONL, JSON (a list of objects) or Parquet file."""
    suffix = path.suffix.lower()
    if suffix not in DATA_SUFFIXES:
        fail(f"{path}: expected one of {', '.join(DATA_SUFFIXES)}")
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        return list(pq.read_table(path).to_pylist())
    text = path.read_text(encoding="utf-8")
    if suffix == ".json" and text.lstrip().startswith("["):
        rows = json.loads(text)
    else:
        try:
            rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as exc:
            fail(f"{path}: not JSON lines: {exc}")
    if not all(isinstance(r, dict) for r in rows):
        fail(f"{path}: every row must be a JSON object")
    return rows


def require_columns(rows: list[dict[str, Any]], path: Path, *options: set[str]) -> set[str]:
    """The first column set of ``options`` every row has; else a bad-input exit naming them."""
    if not rows:
        fail(f"{path}: no rows")
    for columns in options:
        if all(columns <= row.keys() for row in rows):
            return columns
    wanted = " or ".join("+".join(sorted(c)) for c in options)
    fail(f"{path}: expected columns {wanted} (has: {', '.join(sorted(rows[0]))})")


def load_config(path: Path) -> dict[str, Any]:
    try:
        config = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        fail(f"{path}: cannot read it: {exc}")
    if not isinstance(config, dict):
        fail(f"{path}: must be a mapping")
    return config


def load_reward_funcs(exp_dir: Path) -> list[Callable[..., list[float | None]]]:
    """``REWARD_FUNCS`` of the experiment's ``reward.py`` (imported with its folder on the path)."""
    file = exp_dir / REWARD_FILE
    if not file.is_file():
        fail(f"{file}: no such file (trl/grpo's eval scores with the experiment's REWARD_FUNCS)")
    sys.path.insert(0, str(exp_dir))
    spec = importlib.util.spec_from_file_location("starforge_eval_reward", file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    funcs = getattr(module, "REWARD_FUNCS", None)
    if not funcs or not all(callable(f) for f in funcs):
        fail(f"{file}: REWARD_FUNCS must be a non-empty list of functions")
    return list(funcs)


# ---- model ------------------------------------------------------------------------------------


def load_model(folder: str, config: dict[str, Any]) -> tuple[Any, Any]:
    """The model (eval mode, on the GPU unless ``use_cpu`` or none) and its tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device = "cuda" if torch.cuda.is_available() and not config.get("use_cpu") else "cpu"
    model = AutoModelForCausalLM.from_pretrained(folder).to(device).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def as_text(value: Any, tokenizer: Any, where: str) -> str:
    """A row's field as text: a string as is, a conversation through the chat template."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and getattr(tokenizer, "chat_template", None):
        return str(tokenizer.apply_chat_template(value, tokenize=False))
    fail(f"{where}: expected text (a conversation needs a tokenizer with a chat template)")


def token_logprobs(model: Any, ids: list[int]) -> list[float]:
    """log p(ids[i] | ids[:i]) for i = 1..len-1."""
    import torch

    with torch.no_grad():
        tensor = torch.tensor([ids], device=model.device)
        logits = model(input_ids=tensor).logits[0, :-1].float()
        logp = torch.log_softmax(logits, dim=-1)
        picked = logp.gather(1, tensor[0, 1:].unsqueeze(1)).squeeze(1)
    return [float(x) for x in picked]


def encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def continuation_logprobs(
    model: Any, tokenizer: Any, prompt: str, completion: str, max_length: int
) -> list[float]:
    """log-probabilities of the completion's tokens (and EOS) after the prompt."""
    start = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
    p_ids = start + encode(tokenizer, prompt)
    c_ids = encode(tokenizer, completion)
    if tokenizer.eos_token_id is not None:
        c_ids.append(tokenizer.eos_token_id)
    ids = (p_ids + c_ids)[:max_length]
    if len(ids) <= max(len(p_ids), 1):
        return []
    return token_logprobs(model, ids)[max(len(p_ids), 1) - 1 :]


# ---- the evaluations --------------------------------------------------------------------------


def eval_sft(ctx: EvalContext) -> dict[str, float]:
    columns = require_columns(ctx.rows, ctx.data, {"prompt", "completion"}, {"text"}, {"messages"})
    max_length = int(ctx.config.get("max_length") or 1024)
    total, count = 0.0, 0
    for i, row in enumerate(ctx.rows):
        where = f"{ctx.data} row {i + 1}"
        if "prompt" in columns:
            prompt = as_text(row["prompt"], ctx.tokenizer, where)
            completion = as_text(row["completion"], ctx.tokenizer, where)
            logps = continuation_logprobs(ctx.model, ctx.tokenizer, prompt, completion, max_length)
        else:
            text = as_text(row["text" if "text" in columns else "messages"], ctx.tokenizer, where)
            logps = continuation_logprobs(ctx.model, ctx.tokenizer, "", text, max_length)
        total -= sum(logps)
        count += len(logps)
    if count == 0:
        fail(f"{ctx.data}: no tokens to score")
    loss = total / count
    return {"loss": loss, "perplexity": math.exp(min(loss, 700.0)), "tokens": float(count)}


def eval_dpo(ctx: EvalContext) -> dict[str, float]:
    require_columns(ctx.rows, ctx.data, {"prompt", "chosen", "rejected"})
    beta = float(ctx.config.get("beta", 0.1))
    max_length = int(ctx.config.get("max_length") or 1024)
    ref = ctx.ref_model
    margins: list[float] = []
    for i, row in enumerate(ctx.rows):
        where = f"{ctx.data} row {i + 1}"
        prompt, chosen, rejected = (
            as_text(row[k], ctx.tokenizer, where) for k in ("prompt", "chosen", "rejected")
        )

        def logp(model: Any, answer: str, prompt: str = prompt) -> float:
            return sum(continuation_logprobs(model, ctx.tokenizer, prompt, answer, max_length))

        policy = logp(ctx.model, chosen) - logp(ctx.model, rejected)
        reference = logp(ref, chosen) - logp(ref, rejected) if ref is not None else 0.0
        margins.append(beta * (policy - reference))
    losses = [math.log1p(math.exp(-m)) if m > -30 else -m for m in margins]  # -log sigmoid(m)
    return {
        "accuracy": sum(m > 0 for m in margins) / len(margins),
        "margin": sum(margins) / len(margins),
        "loss": sum(losses) / len(losses),
    }


def eval_grpo(ctx: EvalContext) -> dict[str, float]:
    import torch

    require_columns(ctx.rows, ctx.data, {"prompt"})
    funcs = load_reward_funcs(ctx.exp_dir)
    weights = ctx.config.get("reward_weights") or [1.0] * len(funcs)
    if len(weights) != len(funcs):
        fail(f"reward_weights has {len(weights)} weight(s) for {len(funcs)} reward function(s)")
    n = int(ctx.config.get("num_generations") or 8)
    torch.manual_seed(int(ctx.config.get("seed", 0)))
    totals: list[float] = []
    per_func: list[list[float]] = [[] for _ in funcs]
    for i, row in enumerate(ctx.rows):
        prompt = as_text(row["prompt"], ctx.tokenizer, f"{ctx.data} row {i + 1}")
        completions = generate(ctx, prompt, n)
        columns = {k: [v] * n for k, v in row.items() if k not in {"prompt", "completion"}}
        scores = [
            list(f(prompts=[row["prompt"]] * n, completions=completions, **columns)) for f in funcs
        ]
        for j in range(n):
            values = [s[j] for s in scores]
            totals.append(sum(w * v for w, v in zip(weights, values, strict=True) if v is not None))
            for k, v in enumerate(values):
                if v is not None:
                    per_func[k].append(float(v))
    mean = sum(totals) / len(totals)
    metrics = {
        "reward": mean,
        "reward_std": math.sqrt(sum((t - mean) ** 2 for t in totals) / len(totals)),
    }
    for f, values in zip(funcs, per_func, strict=True):
        if values:
            metrics[f"rewards/{getattr(f, '__name__', 'reward')}"] = sum(values) / len(values)
    return metrics


def generate(ctx: EvalContext, prompt: str, n: int) -> list[str]:
    """``n`` sampled completions of ``prompt`` with the config's generation settings."""
    import torch

    tok = ctx.tokenizer
    start = [tok.bos_token_id] if tok.bos_token_id is not None else []
    ids = torch.tensor([start + encode(tok, prompt)], device=ctx.model.device)
    with torch.no_grad():
        out = ctx.model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            do_sample=True,
            num_return_sequences=n,
            max_new_tokens=int(ctx.config.get("max_completion_length") or 256),
            temperature=float(ctx.config.get("temperature") or 1.0),
            top_p=float(ctx.config.get("top_p") or 1.0),
            top_k=0,
            pad_token_id=tok.pad_token_id,
        )
    return [tok.decode(seq[ids.shape[1] :], skip_special_tokens=True) for seq in out]


class EvalContext:
    """What an evaluation reads: the model, its tokenizer, the rows and the run's config."""

    def __init__(self, args: argparse.Namespace, config: dict[str, Any]) -> None:
        self.data: Path = args.data
        self.rows = load_rows(args.data)
        if args.max_examples:
            self.rows = self.rows[: args.max_examples]
        self.config = config
        # reward.py's folder: --exp-dir, else the job's experiment folder, else here (a step
        # run starts in the experiment's folder).
        self.exp_dir: Path = args.exp_dir or Path(os.environ.get("FORGE_EXP_DIR") or Path.cwd())
        self.model, self.tokenizer = load_model(args.model, config)
        self.ref_model = load_model(args.ref_model, config)[0] if args.ref_model else None


EVALUATORS: dict[str, Callable[[EvalContext], dict[str, float]]] = {
    "trl/sft": eval_sft,
    "trl/dpo": eval_dpo,
    "trl/grpo": eval_grpo,
}
assert set(EVALUATORS) == set(EVAL_METRICS)  # the gate's table and the programs agree


# ---- the program ------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m starforge.steps.eval", description=__doc__)
    parser.add_argument("--model", required=True, help="a Hugging Face model folder")
    parser.add_argument("--method", required=True, help=f"one of {', '.join(EVALUATORS)}")
    parser.add_argument("--config", required=True, type=Path, help="the run's config (YAML)")
    parser.add_argument("--data", required=True, type=Path, help="validation data (JSONL/Parquet)")
    parser.add_argument("--out", required=True, type=Path, help="where the JSON report goes")
    parser.add_argument(
        "--exp-dir", type=Path, help="the experiment's folder, for reward.py ($FORGE_EXP_DIR)"
    )
    parser.add_argument("--ref-model", help="reference model folder for trl/dpo's margin")
    parser.add_argument("--max-examples", type=int, default=0, help="evaluate the first N rows")
    parser.add_argument("--step", type=int, default=0, help="the step the metrics are logged at")
    return parser.parse_args(argv)


def default_reference(method: str) -> str | None:
    """trl/dpo's reference when none is given: the job's starting model, if it is a folder."""
    start = os.environ.get("FORGE_MODEL", "")
    if method == "trl/dpo" and start and Path(start, "config.json").is_file():
        return start
    return None


def check_inputs(args: argparse.Namespace) -> dict[str, Any]:
    """Everything that can be checked before torch is imported; returns the config."""
    args.ref_model = args.ref_model or default_reference(args.method)
    if args.method not in EVALUATORS:
        fail(f"--method {args.method}: no platform eval (methods: {', '.join(EVALUATORS)})")
    if not Path(args.model, "config.json").is_file():
        fail(f"--model {args.model}: not a Hugging Face model folder (no config.json)")
    if not args.data.is_file():
        fail(f"--data {args.data}: no such file")
    config = load_config(args.config)
    try:
        gate_of(config)
    except ConfigError as exc:
        fail(str(exc))
    return config


def build_report(args: argparse.Namespace, ctx: EvalContext, metrics: dict[str, float]) -> dict:
    return {
        "method": args.method,
        "model": str(args.model),
        "ref_model": str(args.ref_model) if args.ref_model else None,
        "data": {"path": str(args.data), "sha256": sha256_of(args.data), "rows": len(ctx.rows)},
        "n": len(ctx.rows),
        "metrics": metrics,
        "gate": None,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def publish(metrics: dict[str, float], step: int) -> None:
    """The metrics as ``eval/<name>`` curves of the job's run (nothing outside a job)."""
    import starforge.report as report

    report.log({f"eval/{k}": v for k, v in metrics.items()}, step=step)
    report.finish()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    config = check_inputs(args)
    ctx = EvalContext(args, config)
    metrics = EVALUATORS[args.method](ctx)
    report = build_report(args, ctx, metrics)
    gate = gate_of(config)
    verdict = judge(gate, metrics) if gate is not None else None
    if verdict is not None:
        report["gate"] = verdict.model_dump(mode="json")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(args.out, report)
    print(f"[eval] {json.dumps(metrics, separators=(',', ':'), sort_keys=True)}", flush=True)
    publish(metrics, args.step)
    if verdict is not None:
        print(f"[gate] {verdict.reason}", file=sys.stderr if not verdict.passed else sys.stdout)
        if not verdict.passed:
            return EXIT_GATE_FAILED
    return 0


if __name__ == "__main__":
    sys.exit(main())
