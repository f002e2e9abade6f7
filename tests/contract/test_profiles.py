from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from starforge.contract.errors import ProfileError
from starforge.contract.profiles import (
    ProfileDef,
    parse_profile_arg,
    parse_profile_args,
    resolve,
)

REGISTRY = [
    ProfileDef(name="h200", series="h200", gpus_per_node=8, nodes=1),
    ProfileDef(name="h100", series="h100", gpus_per_node=8, nodes=2),
]


def pools_of(*args: str, roles: list[str] | None = None) -> list[tuple[str, int, int]]:
    pools = resolve(parse_profile_args(list(args)), REGISTRY, roles or ["trainer"])
    return [(p.name, p.nodes, p.gpus_per_node) for p in pools]


def test_bare_name_takes_the_registry_default_shape() -> None:
    assert pools_of("h100") == [("all", 2, 8)]


def test_gpu_count_up_to_a_node_is_one_node() -> None:
    assert pools_of("h200:1") == [("all", 1, 1)]
    assert pools_of("h200:8") == [("all", 1, 8)]


def test_gpu_count_above_a_node_means_full_nodes() -> None:
    assert pools_of("h200:16") == [("all", 2, 8)]


def test_a_count_that_is_not_a_whole_multiple_names_the_rule() -> None:
    with pytest.raises(ProfileError, match="at most 8 or a whole multiple of 8"):
        pools_of("h200:12")


def test_unknown_profile_lists_the_valid_ones() -> None:
    with pytest.raises(ProfileError) as err:
        pools_of("a100:8")
    assert "h100, h200" in (err.value.hint or "")


def test_missing_profile_is_an_error_with_the_format() -> None:
    with pytest.raises(ProfileError, match="--profile is required"):
        parse_profile_args([])


def test_named_pools_must_cover_every_role() -> None:
    got = pools_of("train=h200:8", "rollout=h100:2", roles=["train", "rollout"])
    assert got == [("train", 1, 8), ("rollout", 1, 2)]
    with pytest.raises(ProfileError, match="missing: rollout"):
        pools_of("train=h200:8", roles=["train", "rollout"])


def test_several_profiles_must_all_name_roles() -> None:
    with pytest.raises(ProfileError, match="must name its roles"):
        parse_profile_args(["h200:8", "rollout=h100:2"])


def test_a_role_cannot_land_on_two_pools() -> None:
    with pytest.raises(ProfileError, match="two pools"):
        parse_profile_args(["a=h200:8", "a,b=h100:2"])


@pytest.mark.parametrize("bad", ["", "h200:", "h200:0", "h200:-1", "h200:x", "=h200", "h 200"])
def test_malformed_profiles_are_refused(bad: str) -> None:
    with pytest.raises(ProfileError):
        parse_profile_arg(bad)


@given(gpus=st.integers(min_value=1, max_value=256))
def test_resolved_pools_never_hold_a_partial_node_above_one_node(gpus: int) -> None:
    try:
        [(_, nodes, gpn)] = pools_of(f"h200:{gpus}")
    except ProfileError:
        assert gpus > 8 and gpus % 8
        return
    assert nodes * gpn == gpus
    assert nodes == 1 or gpn == 8


@given(
    name=st.from_regex(r"[a-z][a-z0-9]{0,8}", fullmatch=True),
    gpus=st.integers(min_value=1, max_value=10_000),
)
def test_well_formed_arguments_round_trip_through_the_parser(name: str, gpus: int) -> None:
    req = parse_profile_arg(f"{name}:{gpus}")
    assert (req.name, req.total_gpus, req.roles) == (name, gpus, ())
