"""Build the demo's inputs offline: a tiny random Llama and string-reversal SFT data.

    python prepare.py [--lab DIR] [--force]

Writes, under the lab root (default: two folders above this script, the folder that holds
``experiments/``):

* ``models/tiny-llama/``: a randomly initialised 2-layer Llama (about 80k parameters) with a
  character-level tokenizer built in code, so nothing is downloaded;
* ``data/sft-train.jsonl`` and ``data/sft-val.jsonl``: prompt/completion pairs in TRL's standard
  format, ``{"prompt": "rev abc=", "completion": "cba"}``.

The output is deterministic. Whatever already exists is kept unless ``--force`` is given.

The tiny model and the command line are trl_support.py's, beside this file.
"""

from __future__ import annotations

import os
import random

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before trl_support, which imports transformers

from trl_support import SEED, prepare

LETTERS = "abcdefgh"  # the words to reverse are drawn from these letters...
LENGTHS = (3, 4, 5)  # ...with these lengths
TRAIN_ROWS = 256
VAL_ROWS = 32


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


def main() -> None:
    train_rows, val_rows = reversal_rows()
    files = {"sft-train.jsonl": train_rows, "sft-val.jsonl": val_rows}
    prepare(__doc__.splitlines()[0], files, "rows")


if __name__ == "__main__":
    main()
