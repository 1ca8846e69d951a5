"""The content policy: five detector families, first match only, ordinary text stored."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mymcp.plugins.mnemosyne.memory import (
    ErrorCode,
    MemoryOperationError,
    PolicyReason,
    enforce_content_policy,
    find_disallowed,
)

ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
UPPER_ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
B64URL = ALNUM + "-_"
PROSE = st.sampled_from(["", "note: ", "see ", "value was (", "the user said "])
TAIL = st.sampled_from(["", " today", ").", ", thanks", "\nmore text"])


def _run(alphabet: str, low: int, high: int) -> st.SearchStrategy[str]:
    return st.text(alphabet=alphabet, min_size=low, max_size=high)


def luhn_complete(body: str) -> str:
    """Append the check digit that makes ``body`` Luhn-valid."""
    for check in "0123456789":
        digits = body + check
        total = 0
        for position, char in enumerate(reversed(digits)):
            value = int(char)
            if position % 2 == 1:
                value = value * 2 - 9 if value > 4 else value * 2
            total += value
        if total % 10 == 0:
            return digits
    raise AssertionError("unreachable")


# --- one strategy per family ---------------------------------------------------------------

PRIVATE_KEYS = st.sampled_from(
    [
        "-----BEGIN PRIVATE KEY-----",
        "-----BEGIN RSA PRIVATE KEY-----",
        "-----BEGIN EC PRIVATE KEY-----",
        "-----BEGIN DSA PRIVATE KEY-----",
        "-----BEGIN OPENSSH PRIVATE KEY-----",
        "-----BEGIN PGP PRIVATE KEY BLOCK-----",
    ]
).flatmap(lambda armor: _run(B64URL, 0, 40).map(lambda body: f"{armor}\n{body}\n"))

CREDENTIALS = st.one_of(
    st.tuples(st.sampled_from(["AKIA", "ASIA"]), _run(UPPER_ALNUM, 16, 16)).map("".join),
    st.tuples(st.sampled_from(["ghp_", "gho_", "ghu_", "ghs_", "ghr_"]), _run(ALNUM, 20, 40)).map(
        "".join
    ),
    _run(ALNUM + "_", 20, 40).map(lambda s: "github_pat_" + s),
    st.tuples(st.sampled_from("baprs"), _run(ALNUM + "-", 10, 30)).map(
        lambda t: f"xox{t[0]}-{t[1]}"
    ),
    st.tuples(st.sampled_from(["sk_live_", "rk_live_"]), _run(ALNUM, 10, 30)).map("".join),
    _run(B64URL, 35, 35).map(lambda s: "AIza" + s),
    _run(ALNUM + "_", 20, 48).map(lambda s: "sk-" + s),
    _run(ALNUM + "_", 20, 48).map(lambda s: "sk-proj-" + s),
    st.tuples(
        st.sampled_from(["Authorization", "authorization", "AUTHORIZATION"]),
        st.sampled_from(["Bearer", "Basic", "bearer"]),
        _run(ALNUM + "+/", 8, 40),
    ).map(lambda t: f"{t[0]}: {t[1]} {t[2]}"),
    st.tuples(
        st.sampled_from(
            [
                "password",
                "Password",
                "passwd",
                "pwd",
                "secret",
                "api key",
                "api_key",
                "apikey",
                "API-KEY",
                "access token",
                "access_token",
                "refresh_token",
                "client secret",
                "client_secret",
            ]
        ),
        st.sampled_from(["=", ": ", " = ", ":"]),
        # A value of letters only, capitalised, after a key inside a longer identifier
        # (client_secret=AAAA) reads as a code constant, which the policy lets through.
        _run(ALNUM + "!#$%", 4, 24).filter(lambda value: not value.isalpha()),
    ).map("".join),
    st.tuples(
        st.sampled_from(["https", "http", "postgres", "redis"]),
        _run("abcdefghij", 1, 10),
        _run(ALNUM, 1, 12),
    ).map(lambda t: f"{t[0]}://{t[1]}:{t[2]}@db.example.com/x"),
)

COMPACT_TOKENS = st.tuples(_run(B64URL, 8, 40), _run(B64URL, 1, 60), _run(B64URL, 0, 43)).map(
    lambda t: f"eyJ{t[0]}.{t[1]}.{t[2]}"
)

SSNS = st.tuples(st.integers(0, 999), st.integers(0, 99), st.integers(0, 9999)).map(
    lambda t: f"{t[0]:03d}-{t[1]:02d}-{t[2]:04d}"
)


def _grouped(digits: str, separator: str) -> str:
    if not separator:
        return digits
    groups = [digits[i : i + 4] for i in range(0, len(digits), 4)]
    return separator.join(groups)


CARDS = st.tuples(
    st.integers(12, 18).flatmap(lambda n: _run("0123456789", n, n)),
    st.sampled_from(["", " ", "-"]),
).map(lambda t: _grouped(luhn_complete(t[0]), t[1]))

FAMILIES = [
    (PRIVATE_KEYS, PolicyReason.PRIVATE_KEY_SHAPE),
    (CREDENTIALS, PolicyReason.CREDENTIAL_SHAPE),
    (COMPACT_TOKENS, PolicyReason.COMPACT_TOKEN_SHAPE),
    (SSNS, PolicyReason.GOVERNMENT_IDENTIFIER_SHAPE),
    (CARDS, PolicyReason.PAYMENT_CARD_SHAPE),
]


@pytest.mark.parametrize(("secrets", "reason"), FAMILIES, ids=[r.value for _, r in FAMILIES])
@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_generated_secrets_of_every_family_are_refused(
    secrets: st.SearchStrategy[str], reason: PolicyReason, data: st.DataObject
) -> None:
    text = data.draw(PROSE) + data.draw(secrets) + data.draw(TAIL)
    assert find_disallowed(text) is reason


# --- ordinary text -------------------------------------------------------------------------

LABEL = st.from_regex(r"[a-z][a-z0-9]{0,11}", fullmatch=True)
VERSIONS = st.lists(st.integers(0, 999), min_size=2, max_size=4).map(
    lambda parts: ".".join(map(str, parts))
)
DATES = st.dates().map(lambda d: d.isoformat())
TIMESTAMPS = st.datetimes().map(lambda d: d.strftime("%Y-%m-%dT%H:%M:%SZ"))
HOSTNAMES = st.lists(LABEL, min_size=2, max_size=5).map(".".join)
MODULE_PATHS = st.lists(
    st.from_regex(r"[a-z_][a-z0-9_]{0,11}", fullmatch=True), min_size=2, max_size=6
).map(".".join)
IPV4 = st.tuples(*[st.integers(0, 255)] * 4).map(lambda t: ".".join(map(str, t)))
ORDINARY_PIECE = st.one_of(VERSIONS, DATES, TIMESTAMPS, HOSTNAMES, MODULE_PATHS, IPV4)
WORDS = st.sampled_from(
    ["released", "on", "deployed to", "imports", "and", "version", "the", "see", "v", ","]
)


@settings(max_examples=150, deadline=None)
@given(pieces=st.lists(st.tuples(WORDS, ORDINARY_PIECE), min_size=1, max_size=8))
def test_generated_ordinary_dotted_text_is_accepted(pieces: list[tuple[str, str]]) -> None:
    text = " ".join(f"{word} {piece}" for word, piece in pieces)
    assert find_disallowed(text) is None


@pytest.mark.parametrize(
    "text",
    [
        "Upgrade to 1.2.3 before 2026-07-18.",
        "mymcp.plugins.mnemosyne.memory is the domain package",
        "api.example.com and 10.0.0.1 on port 8443",
        "Dates 2024-01-15 2024-02-16 2024-03-17 were milestones",
        "sk-learn-is-a-python-library-name",
        "Authorization: Bearer tokens are short-lived",
        "The password policy was discussed.",
        "Order 1234-5678 shipped",
        "Call 555-1234 or 555-12-34567",
        "git@github.com:org/repo.git",
        "ssh://git@host.example/repo",
        "https://example.com:8443/path@v2",
        "4111 1111 1111 1112",
    ],
)
def test_ordinary_examples_are_accepted(text: str) -> None:
    assert find_disallowed(text) is None


def test_families_are_checked_in_a_fixed_order_and_first_field_wins() -> None:
    both = "-----BEGIN PRIVATE KEY----- password=hunter22 123-45-6789"
    assert find_disallowed(both) is PolicyReason.PRIVATE_KEY_SHAPE
    with pytest.raises(MemoryOperationError) as caught:
        enforce_content_policy(
            [
                ("title", None),
                ("title", "fine"),
                ("content", "ssn 123-45-6789"),
                ("tags", "pwd=x1y2"),
            ]
        )
    error = caught.value
    assert (error.code, error.field, error.reason) == (
        ErrorCode.DISALLOWED_CONTENT,
        "content",
        "government_identifier_shape",
    )
    payload = error.payload()
    assert set(payload) == {"status", "code", "field", "reason", "message"}
    assert payload["status"] == "refused"
    assert "123-45-6789" not in str(payload)
    assert "123-45-6789" not in str(error)


def test_card_shapes_need_luhn_and_card_grouping() -> None:
    assert find_disallowed("4111 1111 1111 1111") is PolicyReason.PAYMENT_CARD_SHAPE
    assert find_disallowed("3782 822463 10005") is PolicyReason.PAYMENT_CARD_SHAPE
    assert find_disallowed("paid with 4111111111111111.") is PolicyReason.PAYMENT_CARD_SHAPE
    assert find_disallowed("4111 1111 1111 1111 2024") is PolicyReason.PAYMENT_CARD_SHAPE
    assert find_disallowed("4111 1111 1111 1112") is None  # Luhn fails
    assert find_disallowed("41 1111 1111 1111 11") is None  # not a card grouping
    assert find_disallowed("411111111111") is None  # 12 digits
