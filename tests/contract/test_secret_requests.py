"""What a run asks for: the config's ``secrets:`` and ``--secret`` names, merged one per name."""

from __future__ import annotations

import pytest

from starforge.contract.secrets import Mount, SecretRequest, merge_requests, parse_config_secrets


def test_names_and_file_mappings_are_read_from_the_config() -> None:
    found = parse_config_secrets({"secrets": ["HF_TOKEN", {"name": "GCP_KEY", "as": "file"}]})
    assert found == [
        SecretRequest(name="HF_TOKEN"),
        SecretRequest(name="GCP_KEY", mount=Mount.FILE),
    ]


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("HF_TOKEN", "must be a list"),
        (["my-token"], "'my-token' is not a secret name"),
        ([{"name": "K", "as": "volume"}], "use `as: env` or `as: file`"),
        ([{"nam": "K"}], "neither a name nor"),
        ([3], "neither a name nor"),
    ],
)
def test_a_malformed_secrets_list_is_one_clear_error(value: object, needle: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_config_secrets({"secrets": value})
    assert needle in str(err.value)


def test_one_request_per_name_in_first_seen_order_and_file_wins() -> None:
    merged = merge_requests(
        [SecretRequest(name="A"), SecretRequest(name="B")],
        [
            SecretRequest(name="B", mount=Mount.FILE),
            SecretRequest(name="C"),
            SecretRequest(name="A"),
        ],
    )
    assert [(r.name, r.mount.value) for r in merged] == [("A", "env"), ("B", "file"), ("C", "env")]
