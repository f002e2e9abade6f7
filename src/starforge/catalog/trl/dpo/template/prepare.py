"""Build the demo's inputs offline: a tiny random Llama and DPO preference data.

    python prepare.py [--lab DIR] [--force]

Writes, under the lab root (default: two folders above this script, the folder that holds
``experiments/``):

* ``models/tiny-llama/``: a randomly initialised 2-layer Llama (about 80k parameters) with a
  character-level tokenizer built in code, so nothing is downloaded;
* ``data/dpo-train.jsonl`` and ``data/dpo-val.jsonl``: preference pairs in TRL's standard format,
  ``{"prompt": "say myn:", "chosen": "xxxx", "rejected": "biqp"}``: the preferred answer is
  always "xxxx", the rejected one four random letters.

The output is deterministic. Whatever already exists is kept unless ``--force`` is given.

The tiny model and the command line are trl_support.py's, beside this file.
"""

from __future__ import annotations

import os
import random
import string

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before trl_support, which imports transformers

from trl_support import SEED, prepare

CHOSEN = "xxxx"
TRAIN_ROWS = 128
VAL_ROWS = 32


def preference_rows() -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """Pairs with distinct prompts, split into train and validation rows."""
    rng = random.Random(SEED)
    letters = string.ascii_lowercase

    def word(length: int) -> str:
        return "".join(rng.choice(letters) for _ in range(length))

    rows: list[dict[str, str]] = []
    prompts: set[str] = set()
    while len(rows) < TRAIN_ROWS + VAL_ROWS:
        prompt = f"say {word(3)}:"
        rejected = word(len(CHOSEN))
        if prompt in prompts or rejected == CHOSEN:
            continue
        prompts.add(prompt)
        rows.append({"prompt": prompt, "chosen": CHOSEN, "rejected": rejected})
    return rows[:TRAIN_ROWS], rows[TRAIN_ROWS:]


def main() -> None:
    train_rows, val_rows = preference_rows()
    files = {"dpo-train.jsonl": train_rows, "dpo-val.jsonl": val_rows}
    prepare(__doc__.splitlines()[0], files, "pairs")


if __name__ == "__main__":
    main()
