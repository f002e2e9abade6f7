"""Build the demo's inputs offline: a tiny random Llama and string-reversal SFT data.

    python prepare.py [--lab DIR] [--force]

Writes, under the lab root (default: two folders above this script, the folder that holds
``experiments/``):

* ``models/tiny-llama/``: a randomly initialised 2-layer Llama (about 80k parameters) with a
  character-level tokenizer built in code, so nothing is downloaded;
* ``data/sft-train.jsonl`` and ``data/sft-val.jsonl``: prompt/completion pairs in TRL's standard
  format, ``{"prompt": "rev abc=", "completion": "cba"}``.

The output is deterministic. Whatever already exists is kept unless ``--force`` is given.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import string
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

SPECIAL_TOKENS = ["<pad>", "<bos>", "<eos>", "<unk>"]
# One token per printable ASCII character, plus space and newline: 100 tokens in all.
ALPHABET = list(string.ascii_letters + string.digits + string.punctuation + " \n")
SEED = 0

LETTERS = "abcdefgh"  # the words to reverse are drawn from these letters...
LENGTHS = (3, 4, 5)  # ...with these lengths
TRAIN_ROWS = 256
VAL_ROWS = 32


def build_model(target: Path) -> None:
    """Save a random tiny Llama and its character tokenizer to ``target``."""
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


def reversal_rows() -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """Distinct words split into train and validation rows; no word is in both."""
    rng = random.Random(SEED)
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < TRAIN_ROWS + VAL_ROWS:
        word = "".join(rng.choice(LETTERS) for _ in range(rng.choice(LENGTHS)))
        if word not in seen:
            seen.add(word)
            words.append(word)
    rows = [{"prompt": f"rev {word}=", "completion": word[::-1]} for word in words]
    return rows[:TRAIN_ROWS], rows[TRAIN_ROWS:]


def write_jsonl(path: Path, rows: list[dict[str, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    print(f"wrote {path} ({len(rows)} rows)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_lab = Path(__file__).resolve().parents[2]
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

    train_rows, val_rows = reversal_rows()
    for name, rows in {"sft-train.jsonl": train_rows, "sft-val.jsonl": val_rows}.items():
        path = lab / "data" / name
        if args.force or not path.is_file():
            write_jsonl(path, rows)
        else:
            print(f"kept {path} (exists; --force rewrites it)")


if __name__ == "__main__":
    main()
