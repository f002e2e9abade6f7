"""Reward functions for the GRPO demo.

GRPOTrainer calls each function once per batch as ``fn(prompts=..., completions=..., **columns)``
where ``completions`` is a list of strings (for prompts in the standard, non-chat format) and every
other dataset column arrives as a keyword argument. It must return one float per completion (or
``None`` to skip a sample). With several functions the rewards are summed, weighted by
``reward_weights`` from config.yaml, and each one is logged as ``rewards/<function name>/mean``.

The demo task is deliberately easy for a random 80k-parameter model: emit the letter "a".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _text(completion: Any) -> str:
    """The completion's text, for standard (str) and conversational (list of messages) data."""
    if isinstance(completion, str):
        return completion
    return "".join(str(message.get("content", "")) for message in completion)


def a_fraction(completions: list[Any], **_: Any) -> list[float]:
    """Fraction of the completion's characters that are a lowercase "a" (0.0 for an empty one).

    A random model scores about 0.01 (one character in a hundred); a model that has learned the
    task answers "aaaaaaaa" and scores 1.0.
    """
    rewards = []
    for completion in completions:
        text = _text(completion)
        rewards.append(text.count("a") / len(text) if text else 0.0)
    return rewards


# What train.py passes to GRPOTrainer(reward_funcs=...). Add your own functions here.
REWARD_FUNCS: list[Callable[..., list[float]]] = [a_fraction]
