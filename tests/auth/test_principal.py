from __future__ import annotations

import dataclasses

import pytest

from mymcp._base64url import b64url_decode, b64url_encode
from mymcp.auth import ANONYMOUS, AuthFailure, Principal, is_valid_subject
from mymcp.auth._principal import registered_principal


def test_anonymous_principal() -> None:
    assert Principal("anonymous", None, None, "anonymous") == ANONYMOUS
    with pytest.raises(dataclasses.FrozenInstanceError):
        ANONYMOUS.principal_id = "x"  # type: ignore[misc]


def test_failure_codes_are_stable() -> None:
    assert [f.value for f in AuthFailure] == [
        "ambiguous",
        "malformed",
        "no_evidence",
        "rejected",
        "unsupported",
    ]


def test_registered_principal_id_is_unpadded_base64url_of_the_subject() -> None:
    principal = registered_principal("local-client", "alice?>")
    assert principal.kind == "registered"
    assert principal.adapter_id == "local-client"
    assert principal.subject == "alice?>"
    assert principal.principal_id == "registered:local-client:YWxpY2U_Pg"


def test_registered_principal_refuses_invalid_subjects() -> None:
    with pytest.raises(ValueError, match="Authentication-v1"):
        registered_principal("a", " ")


@pytest.mark.parametrize(
    "subject",
    ["alice", "Zoë", "a b", "x" * 256, "é" * 256, "user@example.com", "oauth-jwt-v1:abc"],
)
def test_valid_subjects(subject: str) -> None:
    assert is_valid_subject(subject)


@pytest.mark.parametrize(
    "subject",
    [
        "",
        "   ",
        "\t\n",
        "x" * 257,
        "\U0001f600" * 257,
        "e\u0301",  # decomposed: not NFC
        "a\x00b",  # control
        "a\u200bb",  # format (zero-width space)
        "a\ue000",  # private use
        "a\ud800",  # surrogate
        "a\U000e0fff",  # unassigned
        "a\x7f",
        None,
        42,
        b"alice",
    ],
)
def test_invalid_subjects(subject: object) -> None:
    assert not is_valid_subject(subject)


def test_subject_byte_bound_is_separate_from_code_point_bound() -> None:
    four_byte = "\U00010348"  # Gothic letter hwair, category Lo, 4 UTF-8 bytes
    assert is_valid_subject(four_byte * 256)  # 1024 bytes exactly
    assert not is_valid_subject(four_byte * 256 + "a")


@pytest.mark.parametrize(
    ("text", "expected"),
    [("", b""), ("AA", b"\x00"), ("AAA", b"\x00\x00"), ("-_8", b"\xfb\xff")],
)
def test_b64url_decode_accepts_canonical(text: str, expected: bytes) -> None:
    assert b64url_decode(text) == expected
    assert b64url_encode(expected) == text


@pytest.mark.parametrize("text", ["A", "AB", "AA==", "+/8", "AA A", "QR", "é", "AAB", "AA\n"])
def test_b64url_decode_refuses_non_canonical(text: str) -> None:
    assert b64url_decode(text) is None
