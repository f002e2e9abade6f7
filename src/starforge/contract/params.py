"""Typed method parameters: declarations, ``-s KEY=VALUE`` parsing, validation, resolution.

A value is parsed by the *declared* type, never guessed from its text: ``-s bf16=1`` is a bool,
``-s seed=1e3`` is refused for an int, ``-s tag=007`` stays the string ``"007"``. An unknown key
fails with the closest declared names (never a dump of every name), or, when it is one of a
parameter's ``aliases`` (the name another framework or an older version gives it, e.g.
``grpo.kl_coef`` for NeMo-RL's ``loss_fn.reference_policy_kl_penalty``), with the key meant; an
alias is never accepted in its place, so a run records one name per value. Resolution gives every
declared parameter its value in this order: ``-s``, the experiment's config at the parameter's
path, the declaration's default; the result is what a run records.
"""

from __future__ import annotations

import difflib
import math
import re
from enum import StrEnum
from typing import Any

from pydantic import Field, model_validator

from starforge.contract.base import Contract
from starforge.contract.config import MISSING, get_path, set_path
from starforge.contract.errors import ParamError, UsageError

_INT = re.compile(r"^[+-]?\d+$")
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


class ParamType(StrEnum):
    INT = "int"
    FLOAT = "float"
    BOOL = "bool"
    STR = "str"
    ENUM = "enum"


class Param(Contract):
    """One typed hyperparameter of a method."""

    type: ParamType
    path: str | None = None  # dot-path in the experiment's config; None: read by the entrypoint
    default: Any = None
    min: float | None = None
    max: float | None = None
    exclusive_min: bool = False  # the bound itself is not allowed
    exclusive_max: bool = False
    choices: list[Any] | None = None
    required: bool = False
    doc: str = ""
    group: str = "general"
    # Names a researcher may use for this parameter that are not this method's key (another
    # framework's, an older version's): ``-s ALIAS=...`` is refused naming this parameter.
    aliases: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> Param:
        if self.type is ParamType.ENUM and not self.choices:
            raise ValueError("an enum parameter needs choices")
        if self.type in (ParamType.BOOL, ParamType.STR, ParamType.ENUM) and (
            self.min is not None or self.max is not None
        ):
            raise ValueError(f"a {self.type} parameter cannot have min/max")
        return self

    def describe(self) -> str:
        """The type with its bounds or choices, as `sf methods` shows it."""
        if self.choices:
            return f"{self.type}: {' | '.join(str(c) for c in self.choices)}"
        lo = "" if self.min is None else ("(" if self.exclusive_min else "[") + _num(self.min)
        hi = "" if self.max is None else _num(self.max) + (")" if self.exclusive_max else "]")
        if lo or hi:
            return f"{self.type} {lo or '(-inf'}, {hi or '+inf)'}"
        return str(self.type)


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(x)


def split_set(raw: str, flag: str = "-s") -> tuple[str, str]:
    """``KEY=VALUE`` -> (key, value text); the value may contain ``=`` and may be empty.
    ``flag`` is the option the user wrote it with, which errors name."""
    key, sep, value = raw.partition("=")
    key = key.strip()
    if not sep:
        raise UsageError(
            f"{flag} {raw!r}: expected KEY=VALUE", hint=f"e.g. {flag} learning_rate=1e-5"
        )
    if not key:
        raise UsageError(
            f"{flag} {raw!r}: the key is empty", hint=f"e.g. {flag} learning_rate=1e-5"
        )
    return key, value


def _fail(where: str, name: str, param: Param, why: str) -> ParamError:
    doc = f" ({param.doc})" if param.doc else ""
    return ParamError(
        f"{where}: {why}",
        hint=f"{name} is {param.describe()}{doc}",
        details={"param": name, "where": where},
    )


def coerce(name: str, param: Param, text: str, where: str) -> Any:
    """Parse ``text`` by the declared type."""
    low = text.strip().lower()
    if param.type is ParamType.BOOL:
        if low in _TRUE | _FALSE:
            return low in _TRUE
        raise _fail(where, name, param, f"{text!r} is not a bool (true/false/1/0/yes/no)")
    if param.type is ParamType.INT:
        if not _INT.match(text.strip()):
            raise _fail(where, name, param, f"{text!r} is not a whole number")
        return int(text)
    if param.type is ParamType.FLOAT:
        try:
            value = float(text)
        except ValueError:
            raise _fail(where, name, param, f"{text!r} is not a number") from None
        if not math.isfinite(value):
            raise _fail(where, name, param, f"{text!r} is not a finite number")
        return value
    if param.type is ParamType.ENUM:
        for choice in param.choices or []:
            if str(choice) == text:
                return choice
        raise _fail(where, name, param, f"{text!r} is not one of the choices")
    return text


def check_value(name: str, param: Param, value: Any, where: str) -> Any:
    """Type, range and choices of a value already parsed (from YAML or :func:`coerce`)."""
    kind = param.type
    ok_type = {
        ParamType.BOOL: isinstance(value, bool),
        ParamType.INT: isinstance(value, int) and not isinstance(value, bool),
        ParamType.FLOAT: isinstance(value, int | float) and not isinstance(value, bool),
        ParamType.STR: isinstance(value, str),
        ParamType.ENUM: True,
    }[kind]
    if not ok_type:
        raise _fail(where, name, param, f"{value!r} is a {type(value).__name__}, expected {kind}")
    if kind is ParamType.FLOAT:
        value = float(value)
    if param.choices is not None and value not in param.choices:
        raise _fail(where, name, param, f"{value!r} is not one of the choices")
    if param.min is not None:
        low_ok = value > param.min if param.exclusive_min else value >= param.min
        if not low_ok:
            op = ">" if param.exclusive_min else ">="
            raise _fail(where, name, param, f"{value!r} must be {op} {_num(param.min)}")
    if param.max is not None:
        high_ok = value < param.max if param.exclusive_max else value <= param.max
        if not high_ok:
            op = "<" if param.exclusive_max else "<="
            raise _fail(where, name, param, f"{value!r} must be {op} {_num(param.max)}")
    return value


def suggest(key: str, names: list[str]) -> str:
    """ "did you mean ..." for an unknown key: the closest names, at most three."""
    close = difflib.get_close_matches(key, names, n=3, cutoff=0.6)
    if not close:  # e.g. `kl_coef` for `grpo.kl_coef`: match on the last path segment too
        tails = {n.rsplit(".", 1)[-1]: n for n in names}
        close = [
            tails[t]
            for t in difflib.get_close_matches(key.rsplit(".", 1)[-1], list(tails), n=3, cutoff=0.6)
        ]
    if close:
        return "did you mean " + ", ".join(f"`{c}`" for c in close) + "?"
    return "`sf methods METHOD` lists the parameters"


def meant(key: str, params: dict[str, Param]) -> str | None:
    """The declared parameter that ``key`` is an alias of, if any."""
    return next((name for name, p in params.items() if key in p.aliases), None)


def parse_sets(params: dict[str, Param], sets: list[str], flag: str = "-s") -> dict[str, Any]:
    """Every ``-s`` of a submission (or the values of ``-g``: ``flag``, which errors name),
    parsed and checked; later ones win."""
    values: dict[str, Any] = {}
    for raw in sets:
        key, text = split_set(raw, flag)
        param = params.get(key)
        if param is None:
            name = meant(key, params)
            if name is not None:
                raise ParamError(
                    f"{flag} {key}: the method has no parameter {key!r}; the key meant is {name!r}",
                    hint=f"use {flag} {name}={text}",
                    details={"param": key, "meant": name},
                )
            raise ParamError(
                f"{flag} {key}: the method has no parameter {key!r}",
                hint=suggest(key, sorted(params)),
                details={"param": key},
            )
        where = f"{flag} {key}={text}"
        values[key] = check_value(key, param, coerce(key, param, text, where), where)
    return values


def resolve(
    params: dict[str, Param],
    config: dict[str, Any],
    sets: list[str],
    config_name: str = "config.yaml",
    *,
    strict: bool = True,
) -> dict[str, Any]:
    """The value of every declared parameter: ``-s``, else the config, else the default.

    ``strict=False`` (``--no-validate``) takes config values as they are, unchecked."""
    given = parse_sets(params, sets)
    resolved: dict[str, Any] = {}
    for name, param in params.items():
        if name in given:
            resolved[name] = given[name]
            continue
        found = get_path(config, param.path) if param.path else MISSING
        if found is not MISSING and found is not None:
            where = f"{config_name}: {param.path}"
            if not strict:
                resolved[name] = found
                continue
            if param.type is ParamType.FLOAT and isinstance(found, str):
                # YAML reads `1e-6` (no dot) as a string; it is a number to the framework.
                found = coerce(name, param, found, where)
            resolved[name] = check_value(name, param, found, where)
        elif param.default is not None:
            resolved[name] = param.default
        elif param.required:
            raise ParamError(
                f"parameter {name!r} is required and has no value",
                hint=f"set it with -s {name}=... or in {config_name}"
                + (f" at {param.path}" if param.path else ""),
                details={"param": name},
            )
    return resolved


def apply(
    params: dict[str, Param], config: dict[str, Any], values: dict[str, Any]
) -> dict[str, Any]:
    """A copy of ``config`` with each parameter that has a path set to its value."""
    out = _deepcopy(config)
    for name, value in values.items():
        param = params.get(name)
        if param is not None and param.path:
            set_path(out, param.path, value)
    return out


def bound_names(params: dict[str, Param], config: dict[str, Any]) -> list[str]:
    """The parameters whose path the experiment's config sets (what its lock records)."""
    return sorted(
        n for n, p in params.items() if p.path and get_path(config, p.path) is not MISSING
    )


def _deepcopy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _deepcopy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_deepcopy(v) for v in value]
    return value
