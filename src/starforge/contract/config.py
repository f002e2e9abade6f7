"""Experiment config composition: ``defaults:`` inheritance, deep merge, dot-paths.

``config.yaml`` may say ``defaults: [../../configs/base/grpo.yaml, ../../configs/models/q.yaml]``
(paths relative to the file that names them). Each is composed recursively and deep-merged in
order; the file's own keys are merged last. A mapping with ``_override_: true`` replaces what it
inherits instead of merging into it (the marker is removed). A cycle, a missing file or malformed
YAML is an error naming the file (and line). Reading files is the caller's job (``read``), so
the client, the server and the runner compose the same way from different sources.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.events import AliasEvent
from yaml.nodes import Node

from starforge.contract.errors import ConfigError

# Every YAML document a user writes is read by this loader: libyaml's parser (several times faster
# than the pure-Python one; `sf ls` reads every method declaration) feeding a composer that bounds
# what a small file can cost. PyYAML's own composer follows aliases without limit ("billion
# laughs": 3 KB that expand to 10^9 nodes once copied or merged) and libyaml's recurses in C until
# the stack overflows on deep nesting.
MAX_DEPTH = 100  # nesting levels; real configs use fewer than 20
MAX_ALIAS_NODES = 10_000  # nodes that aliases may add to a document once expanded
_BASE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
OVERRIDE = "_override_"
DEFAULTS = "defaults"


class YAMLLimitError(yaml.MarkedYAMLError):
    """A document beyond :data:`MAX_DEPTH` or :data:`MAX_ALIAS_NODES` (or a recursive alias)."""


class BoundedLoader(_BASE_LOADER):  # type: ignore[misc,valid-type]
    """A safe loader whose composer counts nesting and what aliases expand to, refusing early.

    Each composed node records its expanded size and height, so an alias is charged what it
    would cost as a copy without being copied; the walk never goes deeper than MAX_DEPTH.
    """

    # libyaml's composer is C code that neither counts nor stops: compose with PyYAML's own
    # (below), fed by libyaml's events.
    get_single_node = Composer.get_single_node
    check_node = Composer.check_node
    get_node = Composer.get_node
    compose_document = Composer.compose_document
    compose_scalar_node = Composer.compose_scalar_node
    compose_sequence_node = Composer.compose_sequence_node
    compose_mapping_node = Composer.compose_mapping_node

    def __init__(self, stream: str | bytes) -> None:
        super().__init__(stream)
        self.anchors: dict[str, Node] = {}
        self._depth = 0
        self._composed = 0  # nodes written in the file
        self._expanded = 0  # nodes of the document once every alias is expanded
        self._heights: list[int] = []  # the tallest child so far of each open node
        self._cost: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded size, height)

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        if self.check_event(AliasEvent):
            return self._alias(parent, index)
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise self._limit(f"nesting deeper than {MAX_DEPTH} levels")
        start = self._expanded
        self._composed += 1
        self._expanded += 1
        self._heights.append(0)
        node = Composer.compose_node(self, parent, index)
        height = self._heights.pop() + 1
        self._cost[id(node)] = (self._expanded - start, height)
        if self._heights:
            self._heights[-1] = max(self._heights[-1], height)
        self._depth -= 1
        return node

    def _alias(self, parent: Node | None, index: Any) -> Node:
        event = self.peek_event()
        target = self.anchors.get(event.anchor)
        if target is not None:  # an undefined alias is PyYAML's own error, below
            cost = self._cost.get(id(target))
            if cost is None:
                raise self._limit(f"alias *{event.anchor} refers to a node that contains it")
            size, height = cost
            self._expanded += size
            if self._expanded - self._composed > MAX_ALIAS_NODES:
                raise self._limit(f"aliases expand to more than {MAX_ALIAS_NODES} extra nodes")
            if self._depth + height > MAX_DEPTH:
                raise self._limit(f"alias *{event.anchor} nests deeper than {MAX_DEPTH} levels")
            if self._heights:
                self._heights[-1] = max(self._heights[-1], height)
        return Composer.compose_node(self, parent, index)

    def _limit(self, problem: str) -> YAMLLimitError:
        return YAMLLimitError(problem=problem, problem_mark=self.peek_event().start_mark)


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


def load_yaml(text: str) -> Any:
    """Parse YAML safely and within bounds (raises yaml.YAMLError; YAMLLimitError past them)."""
    return yaml.load(text, Loader=BoundedLoader)


def parse_yaml(text: str, name: str) -> dict[str, Any]:
    try:
        data = load_yaml(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"{name}:{mark.line + 1}" if mark else name
        if isinstance(exc, YAMLLimitError):
            raise ConfigError(
                f"{where}: YAML refused: {exc.problem}",
                hint="write the values out instead of nesting aliases, and nest less deeply",
            ) from None
        raise ConfigError(
            f"{where}: invalid YAML: {exc.problem}", hint="fix the file's syntax"
        ) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{name}: invalid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{name}: the top level must be a mapping of keys, not a {type(data).__name__}"
        )
    return data


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
    may raise UnicodeDecodeError); ``missing_ok`` makes a missing ``path`` an empty config."""
    path = posixpath.normpath(path)
    if missing_ok and _read(read, path) is None:
        return {}
    return _compose(path, read, [])


def _read(read: Callable[[str], str | None], path: str) -> str | None:
    try:
        return read(path)
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path}: not UTF-8 text (byte {exc.start} cannot be decoded)",
            hint="save the file as UTF-8",
        ) from None


def _compose(path: str, read: Callable[[str], str | None], stack: list[str]) -> dict[str, Any]:
    if path in stack:
        chain = " -> ".join([*stack[stack.index(path) :], path])
        raise ConfigError(f"defaults cycle: {chain}", hint="remove one of the references")
    text = _read(read, path)
    if text is None:
        named_by = f" (named in defaults of {stack[-1]})" if stack else ""
        raise ConfigError(
            f"config file {path} does not exist{named_by}",
            hint="check the path; defaults are relative to the file naming them",
        )
    data = parse_yaml(text, path)
    defaults = data.pop(DEFAULTS, [])
    if isinstance(defaults, str):
        defaults = [defaults]
    if not isinstance(defaults, list) or not all(isinstance(d, str) for d in defaults):
        raise ConfigError(f"{path}: `defaults` must be a path or a list of paths")
    merged: dict[str, Any] = {}
    folder = posixpath.dirname(path)
    for ref in defaults:
        child = posixpath.normpath(posixpath.join(folder, ref))
        merged = deep_merge(merged, _compose(child, read, [*stack, path]))
    if data.pop(OVERRIDE, False) is True:  # the whole file replaces what it inherits
        return strip_markers(data)
    return deep_merge(merged, data)


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
