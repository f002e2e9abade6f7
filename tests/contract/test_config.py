from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from starforge.contract.config import compose, deep_merge, flatten, get_path, set_path
from starforge.contract.errors import ConfigError


def reader(files: dict[str, Any]) -> Callable[[str], str | None]:
    def read(path: str) -> str | None:
        value = files.get(path)
        return value if value is None or isinstance(value, str) else yaml.safe_dump(value)

    return read


def test_defaults_merge_in_order_and_the_file_wins() -> None:
    files = {
        "configs/base.yaml": {"policy": {"lr": 1e-6, "model": "base"}, "steps": 10},
        "configs/model.yaml": {"policy": {"model": "qwen"}},
        "experiments/e/config.yaml": {
            "defaults": ["../../configs/base.yaml", "../../configs/model.yaml"],
            "steps": 20,
        },
    }
    got = compose("experiments/e/config.yaml", reader(files))
    assert got == {"policy": {"lr": 1e-6, "model": "qwen"}, "steps": 20}


def test_override_marker_replaces_a_section_instead_of_merging() -> None:
    files = {
        "base.yaml": {"data": {"train": "a", "val": "b"}},
        "e.yaml": {"defaults": "base.yaml", "data": {"_override_": True, "train": "c"}},
    }
    assert compose("e.yaml", reader(files)) == {"data": {"train": "c"}}


def test_a_defaults_cycle_names_the_chain() -> None:
    files = {"a.yaml": {"defaults": ["b.yaml"]}, "b.yaml": {"defaults": ["a.yaml"]}}
    with pytest.raises(ConfigError, match=r"defaults cycle: a\.yaml -> b\.yaml -> a\.yaml"):
        compose("a.yaml", reader(files))


def test_a_missing_default_names_the_file_that_asked_for_it() -> None:
    files = {"e/config.yaml": {"defaults": ["base.yaml"]}}
    with pytest.raises(ConfigError, match=r"e/base.yaml does not exist \(named in defaults of"):
        compose("e/config.yaml", reader(files))


def test_malformed_yaml_names_the_file_and_line() -> None:
    files = {"e.yaml": "a: 1\nb: [unclosed\nc: 3\n"}
    with pytest.raises(ConfigError, match=r"e.yaml:\d+: invalid YAML"):
        compose("e.yaml", reader(files))


def test_dot_paths_read_and_write_nested_keys() -> None:
    config: dict[str, Any] = {"a": {"b": 1}}
    set_path(config, "a.c.d", 2)
    assert get_path(config, "a.c.d") == 2
    assert flatten(config) == {"a.b": 1, "a.c.d": 2}


scalars = st.one_of(st.integers(), st.booleans(), st.text(max_size=5), st.none())
keys = st.text(alphabet="abcde", min_size=1, max_size=3)
trees = st.recursive(scalars, lambda inner: st.dictionaries(keys, inner, max_size=4), max_leaves=12)
mappings = st.dictionaries(keys, trees, max_size=4)


@given(mappings)
def test_merging_into_nothing_is_identity(m: dict[str, Any]) -> None:
    assert deep_merge({}, m) == m


@given(mappings, mappings)
def test_every_leaf_of_the_later_mapping_wins(a: dict[str, Any], b: dict[str, Any]) -> None:
    merged = flatten(deep_merge(a, b))
    for path, value in flatten(b).items():
        if value != {}:
            assert merged[path] == value


# Layers in which each key is always a section or always a value (as in real configs, where
# ``policy`` is a section in every file that has it): there merging is associative.
sections = st.dictionaries(st.sampled_from("de"), scalars, max_size=2)
shaped = st.fixed_dictionaries(
    {}, optional={"a": sections, "b": sections, "x": scalars, "y": scalars}
)


@given(shaped, shaped, shaped)
def test_merge_is_associative_when_each_key_keeps_its_shape(
    a: dict[str, Any], b: dict[str, Any], c: dict[str, Any]
) -> None:
    assert deep_merge(deep_merge(a, b), c) == deep_merge(a, deep_merge(b, c))


def test_a_value_that_replaces_a_section_makes_the_order_of_merging_matter() -> None:
    # Files merge left to right; a middle layer that turns a section into a value drops it, so
    # merging is not associative in general (found by Hypothesis), and compose folds in order.
    a, b, c = {"a": {"a": None}}, {"a": 0}, {"a": {}}
    assert deep_merge(deep_merge(a, b), c) == {"a": {}}
    assert deep_merge(a, deep_merge(b, c)) == {"a": {"a": None}}


@given(mappings, mappings)
def test_composition_equals_merging_the_files_in_order(
    a: dict[str, Any], b: dict[str, Any]
) -> None:
    files = {"base.yaml": a, "e.yaml": {**b, "defaults": ["base.yaml"]}}
    b_without = {k: v for k, v in b.items() if k != "defaults"}
    assert compose("e.yaml", reader(files)) == deep_merge(a, b_without)
