"""Turning what training code logs into what the platform stores.

Metrics: nested mappings flatten with ``/`` (``{"train": {"loss": 1}}`` -> ``train/loss``); numbers
(``int``, ``float``, ``bool``, NumPy and 0-d torch scalars: anything ``float()`` accepts except
text) become floats; non-finite values are dropped and counted, as are values that are not
numbers at all. Hyperparameters keep any JSON value, nested mappings flattened the same way.
Both run inside ``log()``, so the common case (a flat dict of floats) takes one type check per
value; keys the server refuses (empty, longer than 200 characters) are counted there.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


class Counts:
    """What :func:`flatten_metrics` dropped, and one example of each for the warning."""

    __slots__ = ("invalid", "invalid_key", "nonfinite", "nonfinite_key")

    def __init__(self) -> None:
        self.nonfinite = 0
        self.invalid = 0
        self.nonfinite_key = ""
        self.invalid_key = ""


def flatten_metrics(
    metrics: Mapping[Any, Any], counts: Counts, prefix: str = ""
) -> dict[str, float]:
    out: dict[str, float] = {}
    _into(out, metrics, prefix, counts)
    return out


def _into(out: dict[str, float], metrics: Mapping[Any, Any], prefix: str, counts: Counts) -> None:
    for k, v in metrics.items():
        key = prefix + (k if type(k) is str else str(k))
        kind = type(v)
        if kind is float:
            if v - v == 0.0:  # false for nan and ±inf, without a function call
                out[key] = v
            else:
                counts.nonfinite += 1
                counts.nonfinite_key = key
        elif kind is int or kind is bool:
            out[key] = float(v)
        elif isinstance(v, Mapping):
            _into(out, v, key + "/", counts)
        else:
            _other(out, key, v, counts)


def _other(out: dict[str, float], key: str, value: Any, counts: Counts) -> None:
    if isinstance(value, str | bytes) or value is None:
        counts.invalid += 1
        counts.invalid_key = key
        return
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError, RuntimeError):
        counts.invalid += 1  # a list, an object, a tensor with more than one element
        counts.invalid_key = key
        return
    if math.isfinite(number):
        out[key] = number
    else:
        counts.nonfinite += 1
        counts.nonfinite_key = key


def flatten_params(params: Mapping[Any, Any], prefix: str = "") -> dict[str, Any]:
    """Hyperparameters as flat ``key -> JSON value``; other objects become their ``str``."""
    out: dict[str, Any] = {}
    for k, v in params.items():
        key = prefix + str(k)
        if isinstance(v, Mapping):
            out.update(flatten_params(v, key + "/"))
        else:
            out[key] = _json_value(v)
    return out


def _json_value(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, list | tuple):
        return [_json_value(v) for v in value]
    return str(getattr(value, "value", value))  # enums by value, anything else as text
