"""Experiment config composition: ``defaults:`` inheritance, deep merge, dot-paths.

``config.yaml`` may say ``defaults: [../../configs/base/grpo.yaml, ../../configs/models/q.yaml]``
(paths relative to the file that names them). Each is composed recursively and deep-merged in
order; the file's own keys are merged last. A mapping with ``_override_: true`` replaces what it
inherits instead of merging into it (the marker is removed). A cycle, a missing file or malformed
YAML is an error naming the file (and line). Reading files is the caller's job (``read``), so
the client, the server and the runner compose the same way from different sources.

Every file is read by :mod:`starforge.contract.yamlload` (JSON's data model in YAML's syntax,
bounded), and one composition is bounded as a whole (``MAX_CONFIG_*`` below): all distinct files
are parsed once and the references counted, repeats included, before anything is merged, so a
small fan-out of ``defaults`` is refused for the cost of parsing its few distinct files.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml

from starforge.contract.errors import ConfigError
from starforge.contract.yamlload import (
    MAX_ALIAS_NODES,
    MAX_DEPTH,
    BoundedLoader,
    YAMLLimitError,
    YAMLRefusedError,
    load_sized,
    load_yaml,
)

__all__ = [
    "MAX_ALIAS_NODES",
    "MAX_DEPTH",
    "BoundedLoader",
    "YAMLLimitError",
    "YAMLRefusedError",
    "load_yaml",
]

OVERRIDE = "_override_"
DEFAULTS = "defaults"
# What one composed config may cost, checked while each distinct file is read and parsed once,
# before anything is merged (45 references per level on 3 levels, 2.3 KB, once cost 15 s).
MAX_CONFIG_FILES = 64  # files composed, the config included, each counted every time it is named
MAX_DEFAULTS_DEPTH = 8  # levels of `defaults` below the config
MAX_CONFIG_BYTES = 1024 * 1024  # UTF-8 bytes of the files composed (repeats counted)
MAX_CONFIG_NODES = 100_000  # values of the files composed (aliases expanded, repeats counted)
LIMITS_HINT = "compose fewer, smaller files (the limits are in docs/methods.md, Experiment configs)"


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


def parse_yaml(text: str, name: str) -> dict[str, Any]:
    """The top-level mapping of ``text`` (the file ``name``); ConfigError naming file and line."""
    return _parse(text, name)[0]


def _parse(text: str, name: str) -> tuple[dict[str, Any], int]:
    try:
        data, nodes = load_sized(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"{name}:{mark.line + 1}" if mark else name
        if isinstance(exc, YAMLRefusedError):
            raise ConfigError(f"{where}: YAML refused: {exc.problem}", hint=exc.hint) from None
        raise ConfigError(
            f"{where}: invalid YAML: {exc.problem}", hint="fix the file's syntax"
        ) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{name}: invalid YAML: {exc}") from None
    if data is None:
        return {}, nodes
    if not isinstance(data, dict):
        raise ConfigError(
            f"{name}: the top level must be a mapping of keys, not a {type(data).__name__}"
        )
    return data, nodes


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` merged into a copy of ``base``; mappings merge, everything else replaces."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and value.get(OVERRIDE) is True:
            out[key] = strip_markers({k: v for k, v in value.items() if k != OVERRIDE})
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = strip_markers(value)
    return out


def strip_markers(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: strip_markers(v) for k, v in value.items() if k != OVERRIDE}
    if isinstance(value, list):
        return [strip_markers(v) for v in value]
    return value


def compose(
    path: str, read: Callable[[str], str | None], *, missing_ok: bool = False
) -> dict[str, Any]:
    """The composed config of ``path`` (a POSIX path; ``read`` returns None when missing, and
    may raise UnicodeDecodeError); ``missing_ok`` makes a missing ``path`` an empty config.

    Two passes: every distinct file is read and parsed once and the whole composition counted
    against the limits above; only then are the files merged."""
    path = posixpath.normpath(path)
    text = _read(read, path)
    if text is None and missing_ok:
        return {}
    plan = _Plan(path, read, text)
    plan.visit(path, [])
    return plan.merge(path)


def _read(read: Callable[[str], str | None], path: str) -> str | None:
    try:
        return read(path)
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path}: not UTF-8 text (byte {exc.start} cannot be decoded)",
            hint="save the file as UTF-8",
        ) from None


@dataclass(frozen=True)
class _File:
    data: dict[str, Any]  # its own keys, without `defaults` and a top-level `_override_`
    defaults: list[str]  # the files it names, normalised, in order
    replaces: bool  # `_override_: true` at the top: what it inherits is dropped
    size: int  # its UTF-8 bytes
    nodes: int  # its values, aliases expanded


@dataclass(frozen=True)
class _Cost:
    """What composing one file costs, the files below it included (repeats counted)."""

    files: int
    size: int  # bytes
    nodes: int  # values
    height: int  # levels of `defaults` below this file

    def __add__(self, below: _Cost) -> _Cost:
        return _Cost(
            self.files + below.files,
            self.size + below.size,
            self.nodes + below.nodes,
            max(self.height, below.height + 1),
        )


class _Plan:
    """One composition: each distinct file parsed once, the costs counted, then merged."""

    def __init__(self, root: str, read: Callable[[str], str | None], text: str | None) -> None:
        self.root = root
        self.read = read
        self.first = text  # the root's text, already read
        self.files: dict[str, _File] = {}
        self.costs: dict[str, _Cost] = {}
        self.read_bytes = 0  # of the distinct files

    def visit(self, path: str, stack: list[str]) -> _Cost:
        if path in stack:
            chain = " -> ".join([*stack[stack.index(path) :], path])
            raise ConfigError(f"defaults cycle: {chain}", hint="remove one of the references")
        cost = self.costs.get(path)
        if len(stack) + (cost.height if cost else 0) > MAX_DEFAULTS_DEPTH:
            chain = " -> ".join([*stack, path]) + (" -> ..." if cost else "")
            raise ConfigError(
                f"{self.root}: `defaults` nest deeper than {MAX_DEFAULTS_DEPTH} levels ({chain})"
                "; refused",
                hint=LIMITS_HINT,
            )
        if cost is not None:
            return cost
        file = self._load(path, stack)
        cost = self._check(_Cost(1, file.size, file.nodes, 0))
        for child in file.defaults:
            cost = self._check(cost + self.visit(child, [*stack, path]))
        self.costs[path] = cost
        return cost

    def _check(self, cost: _Cost) -> _Cost:
        """``cost`` if within the limits (a part of the composition never costs more than it)."""
        repeats = "a file counts each time it is named"
        if cost.files > MAX_CONFIG_FILES:
            raise self._refuse(f"more than {MAX_CONFIG_FILES} files ({repeats})")
        if cost.size > MAX_CONFIG_BYTES:
            raise self._refuse(f"more than {MAX_CONFIG_BYTES // 1024} KiB of YAML ({repeats})")
        if cost.nodes > MAX_CONFIG_NODES:
            raise self._refuse(
                f"more than {MAX_CONFIG_NODES:,} values (aliases expanded; {repeats})"
            )
        return cost

    def _refuse(self, what: str) -> ConfigError:
        return ConfigError(
            f"{self.root}: the config and its `defaults` compose {what}; refused",
            hint=LIMITS_HINT,
        )

    def _load(self, path: str, stack: list[str]) -> _File:
        text = self.first if path == self.root else _read(self.read, path)
        if text is None:
            named_by = f" (named in defaults of {stack[-1]})" if stack else ""
            raise ConfigError(
                f"config file {path} does not exist{named_by}",
                hint="check the path; defaults are relative to the file naming them",
            )
        size = len(text.encode("utf-8", "surrogatepass"))
        self.read_bytes += size  # checked before parsing: every distinct file is parsed once
        if self.read_bytes > MAX_CONFIG_BYTES:
            raise self._refuse(f"more than {MAX_CONFIG_BYTES // 1024} KiB of YAML (at {path})")
        data, nodes = _parse(text, path)
        defaults = data.pop(DEFAULTS, [])
        if isinstance(defaults, str):
            defaults = [defaults]
        if not isinstance(defaults, list) or not all(isinstance(d, str) for d in defaults):
            raise ConfigError(f"{path}: `defaults` must be a path or a list of paths")
        if len(defaults) >= MAX_CONFIG_FILES:  # refused before the list is walked
            raise self._refuse(f"more than {MAX_CONFIG_FILES} files ({path} names {len(defaults)})")
        folder = posixpath.dirname(path)
        children = [posixpath.normpath(posixpath.join(folder, ref)) for ref in defaults]
        replaces = data.pop(OVERRIDE, False) is True
        file = _File(data=data, defaults=children, replaces=replaces, size=size, nodes=nodes)
        self.files[path] = file
        return file

    def merge(self, path: str) -> dict[str, Any]:
        """The composed config of ``path`` (after :meth:`visit`); merging never changes a file's
        data, so a file named several times is merged from the one parse."""
        file = self.files[path]
        if file.replaces:  # the whole file replaces what it inherits
            return dict(strip_markers(file.data))
        merged: dict[str, Any] = {}
        for child in file.defaults:
            merged = deep_merge(merged, self.merge(child))
        return deep_merge(merged, file.data)


def get_path(config: dict[str, Any], path: str) -> Any:
    """The value at a dot-path, or :data:`MISSING`."""
    node: Any = config
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return MISSING
        node = node[part]
    return node


def set_path(config: dict[str, Any], path: str, value: Any) -> None:
    """Set a dot-path, creating the mappings on the way."""
    parts = path.split(".")
    node = config
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[parts[-1]] = value


def flatten(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``; lists and scalars are leaves."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        full = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flatten(value, f"{full}."))
        else:
            flat[full] = value
    return flat
