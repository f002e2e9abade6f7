"""The one YAML loader of what users write: experiment configs, method.yaml, starforge.yaml.

It reads JSON's data model in YAML's syntax, because what it loads is stored as JSON (the run's
row, ``run.json``; PostgreSQL's ``json`` refuses NaN) and dumped again as YAML with sorted keys
for the job. Anything else would pass admission and fail later as a server error.

Accepted: mappings whose keys are strings, lists, strings, integers of at most
:data:`MAX_INT_DIGITS` digits, finite floats, booleans and null; anchors, aliases and merge keys
(``<<``) within :data:`MAX_DEPTH` and :data:`MAX_ALIAS_NODES`. A plain scalar that YAML 1.1 reads
as a timestamp (``2001-12-14``) stays the string it is written as, as in YAML 1.2 and JSON.

Refused with the line (:class:`YAMLRefusedError`): every other tag (``!!binary``, ``!!set``,
``!!omap``, ``!!pairs``, ``!!timestamp``, ``!!python/…``, local ``!tags``), a scalar its explicit
tag cannot read (``!!int abc``), longer integers (Python itself refuses to read a 4,301-digit one),
``.inf``/``.nan`` and floats that overflow, and keys that are not strings (``1:``, ``on:``).

The loader is libyaml's parser (several times faster than the pure-Python one; `sf ls` reads
every method declaration) feeding a composer that bounds what a small file can cost. PyYAML's own
composer follows aliases without limit ("billion laughs": 3 KB that expand to 10^9 nodes once
copied or merged) and libyaml's recurses in C until the stack overflows on deep nesting.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, ClassVar

import yaml
from yaml.composer import Composer
from yaml.constructor import BaseConstructor, SafeConstructor
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, ScalarNode
from yaml.resolver import Resolver

MAX_DEPTH = 100  # nesting levels; real configs use fewer than 20
MAX_ALIAS_NODES = 10_000  # nodes that aliases may add to a document once expanded
MAX_INT_DIGITS = 100  # digits of an integer as written (a seed or a token count needs 20)
_BASE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_YAML_TAG = "tag:yaml.org,2002:"
# Plain scalars resolve to these types only (YAML 1.1's timestamp and `=` stay strings).
_RESOLVED = {f"{_YAML_TAG}{t}" for t in ("null", "bool", "int", "float", "merge")}
KINDS = "strings, numbers, booleans, null, lists and mappings with string keys"


class YAMLRefusedError(yaml.MarkedYAMLError):
    """A document outside the accepted subset; ``hint`` says what to write instead."""

    hint = "write plain strings, numbers, booleans, lists and mappings"

    def __init__(self, problem: str, mark: yaml.Mark | None, hint: str | None = None) -> None:
        super().__init__(problem=problem, problem_mark=mark)
        if hint is not None:
            self.hint = hint


class YAMLLimitError(YAMLRefusedError):
    """A document beyond :data:`MAX_DEPTH` or :data:`MAX_ALIAS_NODES` (or a recursive alias)."""

    hint = "write the values out instead of nesting aliases, and nest less deeply"


def _short(tag: str) -> str:
    return "!!" + tag.removeprefix(_YAML_TAG) if tag.startswith(_YAML_TAG) else tag


def _scalar(read: Callable[[Any, ScalarNode], Any]) -> Callable[[Any, ScalarNode], Any]:
    """A scalar constructor whose failure to read the text (``!!int abc``) is a refusal."""

    def construct(loader: Any, node: ScalarNode) -> Any:
        try:
            return read(loader, node)
        except (ValueError, KeyError, TypeError, OverflowError):
            raise YAMLRefusedError(
                f"{node.value!r} is not a valid {_short(node.tag)}",
                node.start_mark,
                hint="fix the value, or drop the tag",
            ) from None

    return construct


def _construct_int(loader: Any, node: ScalarNode) -> int:
    written = str(node.value).replace("_", "").lstrip("+-")
    if len(written) > MAX_INT_DIGITS:
        raise YAMLRefusedError(
            f"an integer of {len(written)} digits; at most {MAX_INT_DIGITS} are allowed",
            node.start_mark,
            hint="quote it to keep it as a string",
        )
    return int(SafeConstructor.construct_yaml_int(loader, node))


def _construct_float(loader: Any, node: ScalarNode) -> float:
    value = float(SafeConstructor.construct_yaml_float(loader, node))
    if not math.isfinite(value):
        raise YAMLRefusedError(
            f"{node.value!r} is not a finite number, which JSON (storing configs) cannot hold",
            node.start_mark,
            hint="quote it (e.g. 'inf') if your program reads it as a string",
        )
    return value


def _construct_refused(loader: Any, node: Node) -> Any:
    raise YAMLRefusedError(
        f"the tag {_short(str(node.tag))} is not allowed: a config holds {KINDS}",
        node.start_mark,
        hint="remove the tag; write a date as a string, bytes as base64 text, a set as a list",
    )


def _implicit_resolvers() -> dict[str, list[Any]]:
    """YAML 1.1's implicit resolvers of the types in ``_RESOLVED`` (first character -> list)."""
    out: dict[str, list[Any]] = {}
    for first, resolvers in Resolver.yaml_implicit_resolvers.items():
        kept = [(tag, regexp) for tag, regexp in resolvers if tag in _RESOLVED]
        if kept:
            out[first] = kept
    return out


class BoundedLoader(_BASE_LOADER):  # type: ignore[misc,valid-type]
    """A safe loader for the accepted subset whose composer counts nesting and what aliases
    expand to, refusing early.

    Each composed node records its expanded size and height, so an alias is charged what it
    would cost as a copy without being copied; the walk never goes deeper than MAX_DEPTH.
    ``expanded`` is the document's node count once every alias is expanded.
    """

    yaml_implicit_resolvers: ClassVar[dict[str, list[Any]]] = _implicit_resolvers()
    yaml_constructors: ClassVar[dict[str | None, Any]] = {
        f"{_YAML_TAG}null": _scalar(SafeConstructor.construct_yaml_null),
        f"{_YAML_TAG}bool": _scalar(SafeConstructor.construct_yaml_bool),
        f"{_YAML_TAG}int": _scalar(_construct_int),
        f"{_YAML_TAG}float": _scalar(_construct_float),
        f"{_YAML_TAG}str": SafeConstructor.construct_yaml_str,
        f"{_YAML_TAG}seq": SafeConstructor.construct_yaml_seq,
        f"{_YAML_TAG}map": SafeConstructor.construct_yaml_map,
        None: _construct_refused,  # every other tag
    }
    yaml_multi_constructors: ClassVar[dict[str, Any]] = {}

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
        self.expanded = 0  # nodes of the document once every alias is expanded
        self._heights: list[int] = []  # the tallest child so far of each open node
        self._cost: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded size, height)

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        if not isinstance(node, MappingNode):  # PyYAML's own error, naming the line
            return dict(BaseConstructor.construct_mapping(self, node, deep=deep))
        self.flatten_mapping(node)  # merge keys (<<) first, as SafeConstructor does
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, str):
                kind = "null" if key is None else type(key).__name__
                if not isinstance(key_node, ScalarNode):
                    raise YAMLRefusedError(
                        f"a {kind} used as a key; keys must be strings", key_node.start_mark
                    )
                raise YAMLRefusedError(
                    f"the key {key_node.value!r} reads as {kind}, not a string",
                    key_node.start_mark,
                    hint=f"quote the key: '{key_node.value}':",
                )
        return dict(BaseConstructor.construct_mapping(self, node, deep=deep))

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        if self.check_event(AliasEvent):
            return self._alias(parent, index)
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise self._limit(f"nesting deeper than {MAX_DEPTH} levels")
        start = self.expanded
        self._composed += 1
        self.expanded += 1
        self._heights.append(0)
        node = Composer.compose_node(self, parent, index)
        height = self._heights.pop() + 1
        self._cost[id(node)] = (self.expanded - start, height)
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
            self.expanded += size
            if self.expanded - self._composed > MAX_ALIAS_NODES:
                raise self._limit(f"aliases expand to more than {MAX_ALIAS_NODES} extra nodes")
            if self._depth + height > MAX_DEPTH:
                raise self._limit(f"alias *{event.anchor} nests deeper than {MAX_DEPTH} levels")
            if self._heights:
                self._heights[-1] = max(self._heights[-1], height)
        return Composer.compose_node(self, parent, index)

    def _limit(self, problem: str) -> YAMLLimitError:
        return YAMLLimitError(problem, self.peek_event().start_mark)


def load_sized(text: str) -> tuple[Any, int]:
    """The document of ``text`` and its node count, aliases expanded (raises yaml.YAMLError;
    :class:`YAMLRefusedError` outside the accepted subset or its bounds)."""
    loader = BoundedLoader(text)
    try:
        return loader.get_single_data(), loader.expanded
    finally:
        loader.dispose()


def load_yaml(text: str) -> Any:
    """Parse YAML safely, within bounds and the accepted subset (raises yaml.YAMLError)."""
    return load_sized(text)[0]
