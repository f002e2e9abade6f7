"""The eval program on a real tiny model built in code: SFT loss, DPO accuracy, GRPO reward, gate.

The model's embeddings are zeroed, so every next-token distribution is uniform over the
vocabulary: each token costs exactly ln(V) nats, which makes the expected metrics exact.
"""

from __future__ import annotations

import json
import math
import string
from pathlib import Path
from typing import Any

import pytest
import yaml

from starforge.steps import eval as program
from starforge.steps.gate import EXIT_GATE_FAILED

ALPHABET = list(string.ascii_letters + string.digits + string.punctuation + " \n")
SPECIAL = ["<pad>", "<bos>", "<eos>", "<unk>"]
VOCAB = len(SPECIAL) + len(ALPHABET)


@pytest.fixture(autouse=True)
def _outside_a_job(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("FORGE_MODEL", "FORGE_EXP_DIR", "STARFORGE_TOKEN"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def uniform_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer Llama with a character tokenizer whose predictions are uniform."""
    torch = pytest.importorskip("torch")
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import AutoModelForCausalLM, LlamaConfig, PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(SPECIAL + ALPHABET)}
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tk.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
        padding_side="left",
    )
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=True,
    )
    model = AutoModelForCausalLM.from_config(cfg)
    with torch.no_grad():
        model.get_input_embeddings().weight.zero_()  # tied: logits are 0, predictions uniform
    folder = tmp_path_factory.mktemp("uniform-llama")
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def run_eval(
    tmp_path: Path, model: Path, method: str, rows: list[dict[str, Any]], **config: Any
) -> tuple[int, dict[str, Any]]:
    data = write_jsonl(tmp_path / "val.jsonl", rows)
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump({"use_cpu": True, **config}))
    out = tmp_path / "eval" / "report.json"
    args = [
        "--model",
        str(model),
        "--method",
        method,
        "--config",
        str(cfg),
        "--exp-dir",
        str(tmp_path),
    ]
    code = program.main([*args, "--data", str(data), "--out", str(out)])
    return code, json.loads(out.read_text())


def test_sft_eval_reports_the_mean_token_loss_of_the_completions(
    uniform_model: Path, tmp_path: Path
) -> None:
    rows = [
        {"prompt": "rev abc=", "completion": "cba"},
        {"prompt": "rev hello=", "completion": "olleh"},
    ]

    code, report = run_eval(tmp_path, uniform_model, "trl/sft", rows)

    assert code == 0
    metrics = report["metrics"]
    assert metrics["loss"] == pytest.approx(math.log(VOCAB), rel=1e-5)
    assert metrics["perplexity"] == pytest.approx(VOCAB, rel=1e-4)
    assert metrics["tokens"] == (3 + 1) + (5 + 1)  # completion characters and EOS, not prompts
    assert report["n"] == 2 and report["method"] == "trl/sft"
    data = (tmp_path / "val.jsonl").read_bytes()
    assert report["data"]["sha256"] == __import__("hashlib").sha256(data).hexdigest()
    assert report["gate"] is None


def test_dpo_eval_prefers_the_likelier_answer_and_a_reference_cancels_it(
    uniform_model: Path, tmp_path: Path
) -> None:
    # Uniform predictions: a shorter answer is likelier by ln(V) per missing token.
    rows = [{"prompt": "p:", "chosen": "ab", "rejected": "abcd"}] * 3

    code, report = run_eval(tmp_path, uniform_model, "trl/dpo", rows, beta=0.5)

    assert code == 0
    metrics = report["metrics"]
    assert metrics["accuracy"] == 1.0
    assert metrics["margin"] == pytest.approx(0.5 * 2 * math.log(VOCAB), rel=1e-5)
    assert metrics["loss"] == pytest.approx(math.log1p(math.exp(-metrics["margin"])), rel=1e-5)

    cfg, data = tmp_path / "config.yaml", tmp_path / "val.jsonl"
    out = tmp_path / "with-ref.json"
    args = ["--model", str(uniform_model), "--ref-model", str(uniform_model), "--method", "trl/dpo"]
    assert program.main([*args, "--config", str(cfg), "--data", str(data), "--out", str(out)]) == 0
    same = json.loads(out.read_text())["metrics"]
    assert same["accuracy"] == 0.0 and same["margin"] == 0.0
    assert same["loss"] == pytest.approx(math.log(2), rel=1e-6)  # the policy is its reference


REWARDS = """
def always_one(completions, **_):
    return [1.0 for _ in completions]


def length(completions, **_):
    return [float(len(c)) for c in completions]


REWARD_FUNCS = [always_one, length]
"""


def test_grpo_eval_scores_generations_with_the_experiments_reward_functions(
    uniform_model: Path, tmp_path: Path
) -> None:
    (tmp_path / "reward.py").write_text(REWARDS)
    rows = [{"prompt": "say a:"}, {"prompt": "say b:"}]
    settings = {"num_generations": 3, "max_completion_length": 4, "reward_weights": [1.0, 0.0]}

    code, report = run_eval(tmp_path, uniform_model, "trl/grpo", rows, **settings)

    assert code == 0
    metrics = report["metrics"]
    assert metrics["reward"] == 1.0 and metrics["reward_std"] == 0.0  # length weighs 0
    assert metrics["rewards/always_one"] == 1.0
    assert 0.0 <= metrics["rewards/length"] <= 4.0  # completions of at most 4 characters


def test_a_gate_out_of_reach_fails_the_eval_with_its_reason(
    uniform_model: Path, tmp_path: Path
) -> None:
    rows = [{"prompt": "rev abc=", "completion": "cba"}]
    gate = {"gate": {"metric": "loss", "max": 1.0}}

    code, report = run_eval(tmp_path, uniform_model, "trl/sft", rows, eval=gate)

    assert code == EXIT_GATE_FAILED
    assert report["gate"]["passed"] is False
    assert report["gate"]["reason"].startswith("gate loss <= 1.0 failed: loss = 4.6")


def test_a_gate_within_reach_passes(uniform_model: Path, tmp_path: Path) -> None:
    rows = [{"prompt": "rev abc=", "completion": "cba"}]
    gate = {"gate": {"metric": "perplexity", "max": 1000}}

    code, report = run_eval(tmp_path, uniform_model, "trl/sft", rows, eval=gate)

    assert code == 0 and report["gate"]["passed"] is True


def test_data_without_the_methods_columns_is_bad_input(
    uniform_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        run_eval(tmp_path, uniform_model, "trl/dpo", [{"prompt": "p", "answer": "a"}])

    assert exited.value.code == 2
    assert "expected columns chosen+prompt+rejected" in capsys.readouterr().err


def test_inside_a_job_dpo_measures_against_the_runs_starting_model(
    uniform_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FORGE_MODEL", str(uniform_model))  # what the step run's job env says
    rows = [{"prompt": "p:", "chosen": "ab", "rejected": "abcd"}]

    code, report = run_eval(tmp_path, uniform_model, "trl/dpo", rows)

    assert code == 0 and report["ref_model"] == str(uniform_model)
    assert report["metrics"]["accuracy"] == 0.0  # the policy has not moved from its start
    assert report["metrics"]["loss"] == pytest.approx(math.log(2), rel=1e-6)
