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

from starforge.contract.errors import ConfigError

# libyaml's loader is several times faster than the pure-Python one (`sf ls` reads every
# method declaration); both accept the same documents.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
OVERRIDE = "_override_"
DEFAULTS = "defaults"


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


def load_yaml(text: str) -> Any:
    """Parse YAML safely (raises yaml.YAMLError)."""
    return yaml.load(text, Loader=_LOADER)


def parse_yaml(text: str, name: str) -> dict[str, Any]:
    try:
        data = load_yaml(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"{name}:{mark.line + 1}" if mark else name
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


def compose(path: str, read: Callable[[str], str | None]) -> dict[str, Any]:
    """The composed config of ``path`` (a POSIX path; ``read`` returns None when missing)."""
    return _compose(posixpath.normpath(path), read, [])


def _compose(path: str, read: Callable[[str], str | None], stack: list[str]) -> dict[str, Any]:
    if path in stack:
        chain = " -> ".join([*stack[stack.index(path) :], path])
        raise ConfigError(f"defaults cycle: {chain}", hint="remove one of the references")
    text = read(path)
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
