"""The content check's fast path finds exactly what a plain search of every signature finds."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from starforge.contract.sensitive import (
    _CUES,
    _SIGNATURES,
    HEAD_BYTES,
    Finding,
    _may_hold_cue,
    check_content,
)

# Every literal the check keys on, in several cases, and whole credentials of each kind, so
# that random heads hold cues with and without a real match around them.
LITERALS = [
    b"PRIVATE KEY",
    b"-----BEGIN RSA PRIVATE KEY-----",
    b"-----BEGIN PRIVATE KEY-----",
    b"PuTTY-User-Key-File-",
    b"PuTTY-User-Key-File-3",
    b'"service_account"',
    b'"type": "service_account"',
    b"hf_",
    b"hf_" + b"a1" * 16,
    b"ghp_",
    b"gho_",
    b"ghu_",
    b"ghs_",
    b"ghr_",
    b"github_pat_",
    b"ghp_" + b"Z9" * 18,
    b"github_pat_" + b"x_" * 21,
    b"sk-",
    b"sk-proj-" + b"Ab" * 17,
    b"AKIA",
    b"ASIA",
    b"AKIA" + b"ABCDEFGH23456789",
    b"xox",
    b"xoxb-1234567890-abc",
    b"wandb",
    b"WandB",
    b"WANDB_API_KEY=" + b"0f" * 20,
    b"aws_secret_access_key",
    b"AWS_SECRET_ACCESS_KEY = " + b"A/+b" * 10,
    b"gh",
    b"_",
    b"-",
    b" ",
    b"\n",
    b'"',
]


def reference(data: bytes) -> Finding | None:
    """The rules read plainly: the first signature, in order, found in the first bytes."""
    head = data[:HEAD_BYTES]
    for rule, reason, pattern in _SIGNATURES:
        if pattern.search(head):
            return Finding(rule, f"content: {reason}")
    return None


FOLDED = [b"wandb", b"aws_secret_access_key", b"wandb_api_key: " + b"0f" * 20]


def _mixed_case(literal: bytes) -> st.SearchStrategy[bytes]:
    """``literal`` with any of its ASCII letters swapped to the other case."""
    flips = st.lists(st.booleans(), min_size=len(literal), max_size=len(literal))
    return flips.map(
        lambda flip: bytes(
            c ^ 0x20 if f and chr(c).isascii() and chr(c).isalpha() else c
            for c, f in zip(literal, flip, strict=True)
        )
    )


heads = st.lists(
    st.one_of(
        st.sampled_from(LITERALS),
        st.sampled_from(FOLDED).flatmap(_mixed_case),
        st.binary(max_size=24),
        st.text(max_size=12).map(str.encode),
    ),
    max_size=24,
).map(b"".join)


@settings(max_examples=400)
@given(heads)
@example(b"")
@example(b"x github_pat_" + b"x_" * 21 + b" y")
@example(b"plain text with the word token and keys.py in it")
@example(b"\x00" * 10 + b"aKiA" + b"ABCDEFGH23456789")
def test_the_content_check_agrees_with_a_plain_search_of_every_signature(data: bytes) -> None:
    assert check_content(data) == reference(data)


@settings(max_examples=400)
@given(st.sampled_from(LITERALS), st.binary(max_size=64), st.binary(max_size=64))
def test_a_cue_anywhere_in_ordinary_bytes_is_judged_like_the_reference(
    cue: bytes, before: bytes, after: bytes
) -> None:
    data = before + cue + after
    assert check_content(data) == reference(data)


def test_a_credential_cut_at_the_head_limit_is_judged_only_on_the_head() -> None:
    token = b"hf_" + b"a1" * 16
    for cut in range(len(token) + 1):
        data = b"." * (HEAD_BYTES - cut) + token
        assert check_content(data) == reference(data)


def test_every_signature_is_found_on_its_own() -> None:
    for rule, _reason, pattern in _SIGNATURES:
        samples = [lit for lit in LITERALS if pattern.search(lit)]
        assert samples, rule
        for sample in samples:
            found = check_content(b"ordinary text\n" + sample + b"\nmore text")
            assert found is not None and found == reference(sample), (rule, sample)


def test_no_literal_the_exact_check_keys_on_is_skipped_by_the_fast_path() -> None:
    for _index, folded, literal in _CUES:
        variants = [literal, literal.upper(), literal.title()] if folded else [literal]
        for variant in variants:
            assert _may_hold_cue(b"..." + variant + b"..."), variant
