"""Flattening what training code logs into what the platform stores."""

from __future__ import annotations

import math
from enum import Enum

from hypothesis import given
from hypothesis import strategies as st

from starforge.report.values import Counts, flatten_metrics, flatten_params


class Mode(Enum):
    FAST = "fast"


def test_numbers_of_every_kind_become_floats_and_the_rest_is_counted() -> None:
    counts = Counts()
    got = flatten_metrics(
        {"a": 1, "b": True, "c": 2.5, "d": {"e": {"f": 3}}, "g": "x", "h": None, "i": -math.inf},
        counts,
    )
    assert got == {"a": 1.0, "b": 1.0, "c": 2.5, "d/e/f": 3.0}
    assert (counts.nonfinite, counts.invalid) == (1, 2)
    assert counts.nonfinite_key == "i"


def test_objects_that_convert_to_float_are_numbers() -> None:
    class Scalar:  # what a NumPy or 0-d torch scalar offers
        def __float__(self) -> float:
            return 0.25

    assert flatten_metrics({"x": Scalar()}, Counts()) == {"x": 0.25}


def test_hyperparameters_keep_json_values_and_flatten_mappings() -> None:
    got = flatten_params(
        {"optim": {"lr": 1e-5, "betas": (0.9, 0.95)}, "mode": Mode.FAST, "x": math.nan, "n": None}
    )
    assert got == {
        "optim/lr": 1e-5,
        "optim/betas": [0.9, 0.95],
        "mode": "fast",
        "x": "nan",
        "n": None,
    }


finite = st.floats(allow_nan=False, allow_infinity=False)
tree = st.recursive(
    st.dictionaries(st.text("abc", min_size=1, max_size=3), finite, max_size=4),
    lambda inner: st.dictionaries(st.text("abc", min_size=1, max_size=3), inner, max_size=3),
    max_leaves=12,
)


def leaves(d: dict[str, object]) -> int:
    return sum(leaves(v) if isinstance(v, dict) else 1 for v in d.values())  # type: ignore[arg-type]


@given(tree)
def test_every_finite_leaf_is_kept_under_its_slash_path(metrics: dict[str, object]) -> None:
    counts = Counts()
    got = flatten_metrics(metrics, counts)
    assert counts.nonfinite == counts.invalid == 0
    # Keys here have no "/", so no two paths collide.
    assert len(got) == leaves(metrics)
    assert all(math.isfinite(v) for v in got.values())
