from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from starforge.contract.config import (
    MAX_CONFIG_BYTES,
    MAX_CONFIG_FILES,
    MAX_CONFIG_NODES,
    MAX_DEFAULTS_DEPTH,
    compose,
    deep_merge,
    flatten,
    get_path,
    load_yaml,
    set_path,
)
from starforge.contract.errors import ConfigError
from starforge.contract.yamlload import MAX_INT_DIGITS, YAMLRefusedError


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


# ---- the accepted YAML subset ------------------------------------------------------------------

REFUSED = {
    "a 5,000-digit integer": ("n: " + "1" * 5000, "an integer of 5000 digits; at most 100"),
    "a 5,000-digit hex integer": ("n: 0x" + "f" * 5000, "at most 100 are allowed"),
    "!!binary": ("b: !!binary aGVsbG8=", "the tag !!binary is not allowed"),
    "!!set": ("s: !!set {a, b}", "the tag !!set is not allowed"),
    "!!timestamp, invalid": ("t: !!timestamp 2001-99-99", "the tag !!timestamp is not allowed"),
    "!!timestamp, valid": ("t: !!timestamp 2001-12-14", "the tag !!timestamp is not allowed"),
    "!!omap": ("o: !!omap [a: 1]", "the tag !!omap is not allowed"),
    "!!pairs": ("p: !!pairs [a: 1]", "the tag !!pairs is not allowed"),
    "a python tag": ("x: !!python/object/apply:os.system [id]", "!!python/object/apply:os.system"),
    "a local tag": ("x: !secret 1", "the tag !secret is not allowed"),
    "!!int of no integer": ("x: !!int abc", "'abc' is not a valid !!int"),
    "!!bool of no boolean": ("x: !!bool maybe", "'maybe' is not a valid !!bool"),
    ".inf": ("x: .inf", "'.inf' is not a finite number"),
    ".nan": ("x: .nan", "'.nan' is not a finite number"),
    "an overflowing float": ("x: 1.0e+999", "is not a finite number"),
    "an integer key": ("1: a", "the key '1' reads as int, not a string"),
    "a boolean key": ("on: push", "the key 'on' reads as bool, not a string"),
    "a null key": ("~: a", "the key '~' reads as null"),
    "a list key": ("? [a, b]\n: c", "a list used as a key"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_values_outside_the_json_data_model_are_refused_naming_file_and_line(case: str) -> None:
    text, why = REFUSED[case]
    files = {"e/config.yaml": "lr: 0.1\nsteps: 3\n" + text + "\n"}
    with pytest.raises(ConfigError) as caught:
        compose("e/config.yaml", files.get)
    assert str(caught.value).startswith("e/config.yaml:3: YAML refused: "), caught.value
    assert why in str(caught.value)
    assert caught.value.hint


def test_the_same_loader_reads_method_and_lab_files() -> None:
    with pytest.raises(YAMLRefusedError, match="!!binary"):
        load_yaml("x: !!binary aGVsbG8=\n")


def test_dates_stay_the_strings_they_are_written_as() -> None:
    files = {"e.yaml": "day: 2001-12-14\nat: 2001-12-14 21:59:43.10 -5\nbad: 2001-99-99\n"}
    got = compose("e.yaml", files.get)
    assert got == {"day": "2001-12-14", "at": "2001-12-14 21:59:43.10 -5", "bad": "2001-99-99"}


def test_json_like_yaml_keeps_its_types() -> None:
    text = (
        "base: &base {lr: 1.0e-6, steps: 10}\n"
        "run:\n  <<: *base\n  steps: 20\n"
        "flags: [yes, off, null, ~, 0x1f, 1_000, -3, 'quoted', !!str 12, !!int '7']\n"
        f"seed: {'9' * MAX_INT_DIGITS}\n"
        "op: =\n"
    )
    got = compose("e.yaml", {"e.yaml": text}.get)
    assert got["run"] == {"lr": 1e-6, "steps": 20}
    assert got["flags"] == [True, False, None, None, 31, 1000, -3, "quoted", "12", 7]
    assert got["seed"] == int("9" * MAX_INT_DIGITS)
    assert got["op"] == "="


SPELLINGS = [
    "1", "-2", "0x1f", "0o17", "1_000", "1:30", "1.5", "1.0e+999", ".inf", "-.Inf", ".nan", "1e5",
    "yes", "off", "~", "null", "''", "2001-12-14", "2001-12-14 21:59:43", "!!timestamp 2001-99-99",
    "!!binary aGk=", "!!set {a}", "!!omap [a: 1]", "!!str 1", "!!int '3'", "!!float '2'",
    "!!int x", "!!null x", "=", "'" + "1" * 200 + "'", "1" * 120, "[1, a]", "{a: 1}", "!!map {}",
    "!local x",
]  # fmt: skip
spelled = st.sampled_from(SPELLINGS)
documents = st.dictionaries(st.one_of(spelled, keys), spelled, min_size=1, max_size=6).map(
    lambda d: "".join(f"{k}: {v}\n" for k, v in d.items())
)


@given(documents)
def test_whatever_is_accepted_survives_json_unchanged(text: str) -> None:
    # The CLI composes from files, the server stores JSON and the runner reads it back: one
    # config, whichever of them reads it, or a refusal naming the line.
    try:
        got = compose("e.yaml", {"e.yaml": text}.get)
    except ConfigError as exc:
        assert str(exc).startswith("e.yaml:"), exc
        return
    encoded = json.dumps(got, allow_nan=False, sort_keys=True)
    assert json.loads(encoded) == got
    yaml.safe_dump(got, sort_keys=True)  # as the platform writes it for the job


# ---- the bounds of one composition -------------------------------------------------------------


def counting(files: dict[str, str]) -> tuple[Callable[[str], str | None], list[str]]:
    reads: list[str] = []

    def read(path: str) -> str | None:
        reads.append(path)
        return files.get(path)

    return read, reads


def names(ref: str, times: int) -> str:
    return "defaults: [" + ", ".join([ref] * times) + "]\n"


def fan_out(width: int = 45) -> dict[str, str]:
    """45 references per level on 3 levels: 2.3 KB of YAML that name 91,126 files."""
    return {
        "experiments/e/config.yaml": names("../../configs/l1.yaml", width),
        "configs/l1.yaml": names("l2.yaml", width),
        "configs/l2.yaml": names("l3.yaml", width),
        "configs/l3.yaml": "lr: 0.1\n",
    }


def test_a_defaults_fan_out_is_refused_naming_the_limit_after_one_parse_per_file() -> None:
    files = fan_out()
    assert sum(len(t) for t in files.values()) < 2.5 * 1024
    read, reads = counting(files)
    with pytest.raises(ConfigError) as caught:
        compose("experiments/e/config.yaml", read)
    assert str(caught.value).startswith("experiments/e/config.yaml: ")
    assert f"more than {MAX_CONFIG_FILES} files" in str(caught.value)
    assert "docs/methods.md" in caught.value.hint
    assert sorted(reads) == sorted(files)  # each distinct file read (and parsed) once, no more


def test_a_config_composing_exactly_the_file_limit_is_accepted() -> None:
    files = {"e.yaml": names("b.yaml", MAX_CONFIG_FILES - 1), "b.yaml": "x: 1\n"}
    assert compose("e.yaml", files.get) == {"x": 1}
    files["e.yaml"] = names("b.yaml", MAX_CONFIG_FILES)
    with pytest.raises(ConfigError, match=f"more than {MAX_CONFIG_FILES} files"):
        compose("e.yaml", files.get)


def chain(length: int) -> dict[str, str]:
    files = {f"f{i}.yaml": f"defaults: f{i + 1}.yaml\nk{i}: {i}\n" for i in range(length)}
    files[f"f{length}.yaml"] = "leaf: true\n"
    return files


def test_defaults_nest_at_most_the_depth_limit() -> None:
    assert compose("f0.yaml", chain(MAX_DEFAULTS_DEPTH).get)["leaf"] is True
    with pytest.raises(ConfigError, match=f"nest deeper than {MAX_DEFAULTS_DEPTH} levels"):
        compose("f0.yaml", chain(MAX_DEFAULTS_DEPTH + 1).get)


def test_depth_counts_the_longest_route_to_a_file_named_twice() -> None:
    # f1 is reached first directly, then again at the end of a long route: still too deep.
    files = chain(MAX_DEFAULTS_DEPTH - 1)
    files["top.yaml"] = "defaults: [f1.yaml, g1.yaml]\n"
    files["g1.yaml"] = "defaults: g2.yaml\n"
    files["g2.yaml"] = "defaults: f1.yaml\n"
    route = re.escape("top.yaml -> g1.yaml -> g2.yaml -> f1.yaml -> ...")
    with pytest.raises(ConfigError, match=route):
        compose("top.yaml", files.get)


def test_bytes_composed_count_every_time_a_file_is_named() -> None:
    big = "# " + "x" * (MAX_CONFIG_BYTES // 40) + "\nx: 1\n"
    files = {"e.yaml": names("big.yaml", 20), "big.yaml": big}
    compose("e.yaml", files.get)  # 20 copies fit
    files["e.yaml"] = names("big.yaml", 41)
    with pytest.raises(ConfigError, match=f"more than {MAX_CONFIG_BYTES // 1024} KiB of YAML"):
        compose("e.yaml", files.get)


def test_one_file_over_the_byte_limit_is_refused_before_it_is_parsed() -> None:
    files = {"e.yaml": "[" * (MAX_CONFIG_BYTES + 1)}  # unparseable: the size check comes first
    with pytest.raises(ConfigError, match=f"more than {MAX_CONFIG_BYTES // 1024} KiB"):
        compose("e.yaml", files.get)


def test_values_composed_count_aliases_and_repeats() -> None:
    row = "[" + ", ".join(["1"] * 90) + "]"
    block = f"a: &a {row}\nb: [" + ", ".join(["*a"] * 99) + "]\n"  # 9,000 values, 500 bytes
    per_file = 2 + 91 + 1 + 99 * 91  # the mapping, a and its row, b and its aliases
    fits = MAX_CONFIG_NODES // per_file
    files = {"e.yaml": names("block.yaml", fits - 1), "block.yaml": block}
    assert compose("e.yaml", files.get)["b"][0] == [1] * 90
    files["e.yaml"] = names("block.yaml", fits + 1)
    with pytest.raises(ConfigError, match=f"more than {MAX_CONFIG_NODES:,} values"):
        compose("e.yaml", files.get)


def test_a_file_named_several_times_merges_as_often_as_it_is_named() -> None:
    files = {
        "a.yaml": {"opt": {"lr": 1, "betas": [1, 2]}, "x": "a"},
        "b.yaml": {"opt": {"lr": 2, "_override_": True}, "x": "b"},
        "e.yaml": {"defaults": ["a.yaml", "b.yaml", "a.yaml"], "y": 1},
    }
    got = compose("e.yaml", reader(files))
    assert got == {"opt": {"lr": 1, "betas": [1, 2]}, "x": "a", "y": 1}
    got["opt"]["betas"].append(3)  # the result shares nothing with the parsed files
    assert compose("e.yaml", reader(files))["opt"]["betas"] == [1, 2]
