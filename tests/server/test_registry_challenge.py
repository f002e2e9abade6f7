"""The ``WWW-Authenticate`` challenges registries send, read as the distribution spec's clients
read them (server/registry_auth.parse_challenges). Pure: no socket."""

from __future__ import annotations

import pytest

from starforge.server.registry_auth import Challenge, parse_challenges


def test_docker_hubs_bearer_challenge_gives_realm_service_and_scope() -> None:
    header = (
        'Bearer realm="https://auth.docker.io/token",service="registry.docker.io",'
        'scope="repository:library/ubuntu:pull"'
    )
    assert parse_challenges(header) == [
        Challenge(
            scheme="bearer",
            params={
                "realm": "https://auth.docker.io/token",
                "service": "registry.docker.io",
                "scope": "repository:library/ubuntu:pull",
            },
        )
    ]


def test_a_comma_inside_a_quoted_scope_stays_in_the_value() -> None:
    header = 'Bearer realm="https://ghcr.io/token",scope="repository:lab/x:pull,push"'
    [challenge] = parse_challenges(header)
    assert challenge.params["scope"] == "repository:lab/x:pull,push"


def test_several_challenges_in_one_header_are_read_in_order() -> None:
    header = 'Basic realm="Registry Realm", Bearer realm="https://nvcr.io/proxy_auth",service=ngc'
    got = parse_challenges(header)
    assert [c.scheme for c in got] == ["basic", "bearer"]
    assert got[0].params == {"realm": "Registry Realm"}
    assert got[1].params == {"realm": "https://nvcr.io/proxy_auth", "service": "ngc"}


def test_scheme_and_parameter_names_are_case_insensitive_values_are_kept() -> None:
    [challenge] = parse_challenges('BEARER Realm="https://A.example/Token" , Service=Reg')
    assert challenge == Challenge(
        scheme="bearer", params={"realm": "https://A.example/Token", "service": "Reg"}
    )


def test_escaped_quotes_in_a_quoted_value_are_unescaped() -> None:
    [challenge] = parse_challenges(r'Basic realm="the \"lab\" registry"')
    assert challenge.params["realm"] == 'the "lab" registry'


def test_an_error_parameter_after_the_scope_is_one_more_parameter() -> None:
    header = (
        'Bearer realm="https://auth.example/token",service="reg",'
        'scope="repository:lab/tiny:pull",error="insufficient_scope"'
    )
    [challenge] = parse_challenges(header)
    assert challenge.params["error"] == "insufficient_scope"
    assert challenge.params["scope"] == "repository:lab/tiny:pull"


def test_a_token68_after_the_scheme_is_kept_apart_from_parameters() -> None:
    got = parse_challenges("Negotiate YII+Ag==, Basic realm=x")
    assert got == [
        Challenge(scheme="negotiate", token68="YII+Ag=="),
        Challenge(scheme="basic", params={"realm": "x"}),
    ]


@pytest.mark.parametrize("header", ["", "   ", ",,", '="x"'])
def test_an_empty_or_malformed_header_gives_no_challenge(header: str) -> None:
    assert parse_challenges(header) == []


def test_parsing_stops_at_a_malformed_part_and_keeps_what_came_before() -> None:
    got = parse_challenges('Bearer realm="https://a.example/t", service=')
    assert got == [Challenge(scheme="bearer", params={"realm": "https://a.example/t"})]


def test_a_scheme_alone_is_a_challenge_without_parameters() -> None:
    assert parse_challenges("Basic") == [Challenge(scheme="basic")]
