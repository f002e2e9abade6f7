"""The --profile grammar and its resolution: examples of each rule and its error, and
properties over generated arguments (round trip, whole nodes, every role on exactly one pool)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from starforge.contract.errors import ProfileError
from starforge.contract.profiles import (
    ProfileDef,
    ProfileRequest,
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


# ---- properties of the grammar -------------------------------------------------------------

NAME = st.from_regex(r"[a-z][a-z0-9]{0,6}", fullmatch=True)
ROLE = st.from_regex(r"[a-z][a-z0-9_-]{0,8}", fullmatch=True)


@given(st.text(max_size=40))
def test_any_text_either_parses_or_is_a_profile_error_naming_the_format(text: str) -> None:
    try:
        req = parse_profile_arg(text)
    except ProfileError as err:
        assert text in err.message or repr(text) in err.message or "role" in err.message
        return
    assert req.name and (req.total_gpus is None or req.total_gpus >= 1)


@given(
    roles=st.lists(ROLE, min_size=1, max_size=3, unique=True),
    name=NAME,
    gpus=st.none() | st.integers(min_value=1, max_value=512),
)
def test_a_formatted_request_parses_back_to_itself(
    roles: list[str], name: str, gpus: int | None
) -> None:
    raw = f"{','.join(roles)}={name}" + ("" if gpus is None else f":{gpus}")
    assert parse_profile_arg(raw) == ProfileRequest(
        raw=raw, roles=tuple(roles), name=name, total_gpus=gpus
    )


@given(
    gpn=st.integers(min_value=1, max_value=16),
    default_nodes=st.integers(min_value=1, max_value=4),
    gpus=st.none() | st.integers(min_value=1, max_value=256),
)
def test_a_resolved_pool_holds_exactly_what_was_asked_in_whole_nodes_above_one_node(
    gpn: int, default_nodes: int, gpus: int | None
) -> None:
    registry = [ProfileDef(name="x", series="s", gpus_per_node=gpn, nodes=default_nodes)]
    raw = "x" if gpus is None else f"x:{gpus}"
    try:
        [got] = resolve(parse_profile_args([raw]), registry, ["trainer"])
    except ProfileError as err:
        assert gpus is not None and gpus > gpn and gpus % gpn
        assert f"whole multiple of {gpn}" in err.message  # the error names the rule
        return
    want = default_nodes * gpn if gpus is None else gpus
    assert got.total_gpus == want and got.series == "s" and got.roles == ["trainer"]
    assert got.gpus_per_node <= gpn and (got.nodes == 1 or got.gpus_per_node == gpn)


@given(
    roles=st.lists(ROLE, min_size=1, max_size=5, unique=True),
    data=st.data(),
)
def test_named_pools_cover_every_role_exactly_once_or_the_error_names_what_is_missing(
    roles: list[str], data: st.DataObject
) -> None:
    groups = data.draw(st.integers(min_value=1, max_value=len(roles)))
    owner = {r: data.draw(st.integers(0, groups - 1)) for r in roles}
    assigned = [[r for r in roles if owner[r] == g] for g in range(groups)]
    assigned = [g for g in assigned if g]
    dropped = data.draw(st.sampled_from([None, *roles])) if len(roles) > 1 else None
    args = []
    for i, group in enumerate(assigned):
        kept = [r for r in group if r != dropped]
        if kept:
            args.append(f"{','.join(kept)}={'h200' if i % 2 == 0 else 'h100'}:{i + 1}")
    try:
        pools = resolve(parse_profile_args(args), REGISTRY, roles)
    except ProfileError as err:
        assert dropped is not None and f"missing: {dropped}" in err.message
        assert "the method's roles" in (err.hint or "")
        return
    assert dropped is None or dropped not in roles
    carried = [r for p in pools for r in p.roles]
    assert sorted(carried) == sorted(roles) and all(p.roles for p in pools)


@given(roles=st.lists(ROLE, min_size=1, max_size=3, unique=True), extra=ROLE)
def test_a_role_the_method_lacks_is_refused_with_the_valid_roles(
    roles: list[str], extra: str
) -> None:
    if extra in roles:
        return
    with pytest.raises(ProfileError) as err:
        resolve(parse_profile_args([f"{','.join([*roles, extra])}=h200:8"]), REGISTRY, roles)
    assert extra in err.value.message and ", ".join(roles) in (err.value.hint or "")
