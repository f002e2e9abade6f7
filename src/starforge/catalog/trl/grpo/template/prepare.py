"""Build the demo's inputs offline: a tiny random Llama and GRPO prompt files.

    python prepare.py [--lab DIR] [--force]

Writes, under the lab root (default: two folders above this script, the folder that holds
``experiments/``):

* ``models/tiny-llama/``: a randomly initialised 2-layer Llama (about 80k parameters) with a
  character-level tokenizer built in code, so nothing is downloaded;
* ``data/train.jsonl`` and ``data/val.jsonl``: prompts in TRL's standard format
  (``{"prompt": ...}``).

The output is deterministic. Whatever already exists is kept unless ``--force`` is given.

The tiny model and the command line are trl_support.py's, beside this file.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before trl_support, which imports transformers

from trl_support import prepare

VERBS = ["Say", "Write", "Type", "Print", "Repeat", "Emit"]
OBJECTS = ["a", "the letter a", "only a", "aaaa"]
ENDINGS = [":", "!"]


def all_prompts() -> list[str]:
    """Every prompt, in a fixed order."""
    return [f"{verb} {obj}{end}" for obj in OBJECTS for verb in VERBS for end in ENDINGS]


def main() -> None:
    prompts = all_prompts()  # 48 prompts: every 6th one is held out for validation
    files = {
        "train.jsonl": [{"prompt": p} for i, p in enumerate(prompts) if i % 6 != 5],
        "val.jsonl": [{"prompt": p} for i, p in enumerate(prompts) if i % 6 == 5],
    }
    prepare(__doc__.splitlines()[0], files, "prompts")


if __name__ == "__main__":
    main()
