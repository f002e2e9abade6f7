"""typer's coercion of parameter values, without a pydantic validator for a value it keeps as is.

typer 0.29 passes every parameter's value, an unset option's None and a default included, through
a pydantic ``TypeAdapter`` it builds for the parameter on first use: for ``sf job ls`` that is
importing pydantic's validators and building eight adapters (about a fifth of the command's CPU
before its request) to hand back ``None``, ``20`` and ``False`` unchanged.

:func:`install` gives each typer parameter a coercion that answers, itself, only what typer's
would answer unchanged or trivially, and builds typer's own (once per parameter, as typer does)
for anything else, so every value that can be refused and every error message stay typer's:

* ``None`` for a single-valued parameter: None (typer's ``RuntimeParam.coerce`` does the same
  before any adapter);
* a ``str`` parameter: a ``str`` value that UTF-8 can encode, unchanged;
* an ``int`` parameter without ``min``/``max``: an ``int``, unchanged; a string of at most 18
  ASCII digits with an optional minus sign, as ``int()`` reads it;
* a ``float`` parameter without ``min``/``max``: a ``float``, unchanged; a ``bool`` one: a bool.

Nothing here applies to a parameter with a ``parser``, a file, a list or tuple, a choice, a path
or a date: typer's coercion does those. ``tests/cli/test_coercion.py`` checks these answers
against typer's adapters, and the typer pin in ``pyproject.toml`` keeps the private hook
(``_TyperParameter.get_runtime_param``) where this module finds it.
"""

from __future__ import annotations

import re
from typing import Any

from typer import core

_INT = re.compile(r"-?[0-9]{1,18}")
_PLAIN = (str, int, float, bool)


class _Keep:
    """Returned when typer's own coercion must decide."""


KEEP_TO_TYPER = _Keep()


def as_is(annotation: Any, info: Any, value: Any) -> Any:
    """What typer's adapter answers for ``value`` when that is plain (see the module's list);
    :data:`KEEP_TO_TYPER` otherwise."""
    if annotation not in _PLAIN or getattr(info, "parser", None) is not None:
        return KEEP_TO_TYPER
    kind = type(value)
    if annotation is str:
        if kind is str and _encodable(value):
            return value
        return KEEP_TO_TYPER
    if annotation is bool:
        return value if kind is bool else KEEP_TO_TYPER
    if info.min is not None or info.max is not None:
        return KEEP_TO_TYPER
    if kind is annotation:
        return value
    if annotation is int and kind is str and _INT.fullmatch(value):
        return int(value)
    return KEEP_TO_TYPER


def _encodable(text: str) -> bool:
    """A lone surrogate (an undecodable argv byte) is left to pydantic, which refuses it."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class Deferred:
    """A parameter's coercion: plain values here, the rest through typer's, built on first need."""

    __slots__ = ("built", "descriptor")

    def __init__(self, descriptor: Any) -> None:
        self.descriptor = descriptor
        self.built: Any = None

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        descriptor = self.descriptor
        if descriptor.file_annotation is None:
            if value is None and not (param.multiple or param.nargs == -1):
                return None
            kept = as_is(descriptor.annotation, descriptor.parameter_info, value)
            if kept is not KEEP_TO_TYPER:
                return kept
        if self.built is None:
            self.built = core.build_runtime_param(descriptor)
        return self.built.coerce(value, param=param, ctx=ctx)


def _runtime_param(self: Any) -> Any:
    if self._runtime_param is None:
        self._runtime_param = Deferred(self.type_descriptor)
    return self._runtime_param


def install() -> None:
    """Every typer parameter coerces through :class:`Deferred` from now on (idempotent)."""
    core._TyperParameter.get_runtime_param = _runtime_param  # type: ignore[method-assign]
