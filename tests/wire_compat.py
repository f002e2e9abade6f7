"""What would break between two releases on the wire, found by comparing their schemas.

Given the wire of two releases (tests/wire_schemas.py: the OpenAPI document and the other models
that cross a process boundary), :func:`breaks` lists, as sentences, every message one side writes
that the other cannot read:

- a value of an enum or literal the writer may send and the reader does not know;
- ``null`` where the reader needs a value;
- a field the reader requires that the writer does not have;
- a field the writer sends that a strict reader (the server parsing a request) does not know.

Every field a writer has is taken as sent (both sides dump whole models). Answers are read
leniently (unknown fields ignored); requests strictly. Types other than these are not compared.
A value the new server answers the old release's clients with another they know
(``contract/answering.py``) is not sent to them as it is: ``breaks(..., told_otherwise=...)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

_METHODS = ("get", "post", "put", "patch", "delete")
_ANSWERED = ("200", "201")


@dataclass
class _Node:
    """One schema with its references followed and its alternatives (anyOf/oneOf) merged."""

    values: set[Any] | None = field(default_factory=set)  # None: any value
    nullable: bool = False
    properties: dict[str, tuple[dict[str, Any], dict[str, Any]]] = field(default_factory=dict)
    required: set[str] = field(default_factory=set)
    items: list[tuple[dict[str, Any], dict[str, Any]]] = field(default_factory=list)
    closed: bool = False  # refuses fields it does not know (a model with extra="forbid")


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        target: Any = root
        for part in schema["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        schema = target
    return schema


def _node(schema: dict[str, Any], root: dict[str, Any]) -> _Node:
    node = _Node()
    stack = [schema]
    while stack:
        one = _resolve(stack.pop(), root)
        alternatives = one.get("anyOf") or one.get("oneOf") or one.get("allOf")
        if alternatives:
            stack.extend(alternatives)
            continue
        if one.get("type") == "null":
            node.nullable = True
            continue
        if not one.keys() & {"type", "const", "enum", "properties", "items"}:
            node.values, node.nullable = None, True  # any value at all
            continue
        if "const" in one or "enum" in one:
            if node.values is not None:
                node.values.update([one["const"]] if "const" in one else one["enum"])
        else:
            node.values = None
        for name, sub in one.get("properties", {}).items():
            node.properties[name] = (sub, root)
        node.required.update(one.get("required", []))
        if isinstance(one.get("items"), dict):
            node.items.append((one["items"], root))
        if isinstance(one.get("additionalProperties"), dict):
            node.items.append((one["additionalProperties"], root))
        node.closed = node.closed or one.get("additionalProperties") is False
    return node


@dataclass
class _Pass:
    found: list[str] = field(default_factory=list)
    seen: set[tuple[int, int, bool, frozenset[str]]] = field(default_factory=set)

    def compare(
        self,
        writer: tuple[dict[str, Any], dict[str, Any]],
        reader: tuple[dict[str, Any], dict[str, Any]],
        strict: bool,
        where: str,
        unsent: frozenset[str] = frozenset(),
    ) -> None:
        key = (id(_resolve(*writer)), id(_resolve(*reader)), strict, unsent)
        if key in self.seen:
            return
        self.seen.add(key)
        w, r = _node(*writer), _node(*reader)
        sent = None if w.values is None else {v for v in w.values if str(v) not in unsent}
        if sent is not None and r.values is not None and (extra := sent - r.values):
            self.found.append(f"{where}: {sorted(map(str, extra))} unknown to the reader")
        if w.nullable and not r.nullable:
            self.found.append(f"{where}: null where the reader needs a value")
        for name in sorted(r.required - set(w.properties)):
            self.found.append(f"{where}.{name}: required by the reader, not sent")
        for name, sub in w.properties.items():
            if name in r.properties:
                self.compare(sub, r.properties[name], strict, f"{where}.{name}", unsent)
            elif strict and r.closed:
                self.found.append(f"{where}.{name}: sent, refused by the reader as unknown")
        for w_item in w.items:
            for r_item in r.items:
                self.compare(w_item, r_item, strict, f"{where}[]", unsent)


def _bodies(openapi: dict[str, Any]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """(method, path, "request" | "answer") -> the JSON body's schema."""
    found = {}
    for path, item in openapi.get("paths", {}).items():
        for method in _METHODS:
            op = item.get(method)
            if op is None:
                continue
            request = op.get("requestBody", {}).get("content", {}).get("application/json")
            if request and "schema" in request:
                found[(method.upper(), path, "request")] = request["schema"]
            for status in _ANSWERED:
                answer = op.get("responses", {}).get(status, {}).get("content", {})
                schema = answer.get("application/json", {}).get("schema")
                if schema:
                    found[(method.upper(), path, "answer")] = schema
    return found


def breaks(
    old: dict[str, Any],
    new: dict[str, Any],
    *,
    clients: bool,
    servers: bool,
    told_otherwise: frozenset[str] = frozenset(),
) -> list[str]:
    """Every message that one release writes and the other cannot read.

    ``clients``: the new server still accepts the old release's clients and runners (their
    requests, its answers to them, its bindings and log events). ``servers``: the new client
    still talks to the old release's servers (its requests to them, their answers).
    ``told_otherwise``: values the new server answers the old release's clients with others."""
    check = _Pass()
    old_api, new_api = old["openapi"], new["openapi"]
    old_bodies, new_bodies = _bodies(old_api), _bodies(new_api)
    for (method, path, kind), old_schema in old_bodies.items():
        new_schema = new_bodies.get((method, path, kind))
        if new_schema is None:
            continue
        where = f"{method} {path} {kind}"
        o, n = (old_schema, old_api), (new_schema, new_api)
        if kind == "request":
            if clients:  # the old release's client or runner sends, this server parses strictly
                check.compare(o, n, True, f"old client -> {where}")
            if servers:
                check.compare(n, o, True, f"new client -> old server {where}")
        else:
            if clients:
                check.compare(n, o, False, f"{where} -> old client", told_otherwise)
            if servers:
                check.compare(o, n, False, f"old server {where} -> new client")
    for name, old_model in old.get("models", {}).items():
        new_model = new.get("models", {}).get(name)
        if new_model is None:
            continue
        if clients:
            new_side, old_side = (new_model, new_model), (old_model, old_model)
            check.compare(new_side, old_side, False, f"{name} -> old", told_otherwise)
        if servers:
            check.compare((old_model, old_model), (new_model, new_model), False, f"old {name} ->")
    return check.found
