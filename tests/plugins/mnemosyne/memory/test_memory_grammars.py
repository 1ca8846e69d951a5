"""Identifier, language, text, tag and timestamp grammars."""

from __future__ import annotations

import re
import unicodedata
from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from mymcp.plugins.mnemosyne.memory import (
    KIND_GUIDANCE,
    MEMORY_KINDS,
    NAMESPACE_KINDS,
    Scope,
    is_identifier,
    is_legacy_id,
    is_memory_id,
    is_timestamp,
    kind_requires_occurred_at,
    normalize_language,
    normalize_tags,
    normalize_text,
)
from mymcp.plugins.mnemosyne.memory.model import format_timestamp, utc_now_seconds

IDENTIFIER = re.compile(r"[a-z0-9]([a-z0-9_-]{0,62}[a-z0-9])?")


def test_vocabulary_covers_every_scope_and_pair() -> None:
    assert [s.value for s in Scope] == [
        "self", "relationship", "preference", "practice", "project", "knowledge", "agent",
    ]  # fmt: skip
    assert set(NAMESPACE_KINDS) == set(Scope) == set(MEMORY_KINDS)
    pairs = {(scope, kind) for scope in Scope for kind in MEMORY_KINDS[scope]}
    assert set(KIND_GUIDANCE) == pairs
    # Short phrases: they are published in memory_remember's kind description.
    assert all(
        text and not text.endswith(".") and len(text) < 60 for text in KIND_GUIDANCE.values()
    )
    assert sum(len(kinds) for kinds in MEMORY_KINDS.values()) == 18
    assert kind_requires_occurred_at("event")
    assert not kind_requires_occurred_at("decision")


@given(st.text(max_size=70))
def test_identifier_grammar_matches_the_contract(value: str) -> None:
    assert is_identifier(value) == (IDENTIFIER.fullmatch(value) is not None)


@given(st.from_regex(IDENTIFIER, fullmatch=True))
def test_generated_identifiers_are_accepted(value: str) -> None:
    assert is_identifier(value)


def test_identifier_edges() -> None:
    assert is_identifier("a")
    assert is_identifier("a-b_c")
    assert is_identifier("x" * 64)
    for bad in ("", "-a", "a-", "_a", "A", "x" * 65, "a b", "a\n", "é", None, 5):
        assert not is_identifier(bad)


@given(st.text(max_size=110))
def test_legacy_id_grammar(value: str) -> None:
    expected = re.fullmatch(r"[A-Za-z0-9._-]{1,100}", value) is not None
    assert is_legacy_id(value) == expected


def test_memory_id_grammar() -> None:
    assert is_memory_id("mem_" + "0123456789abcdef" * 2)
    for bad in ("mem_" + "A" * 32, "mem_" + "a" * 31, "mem_" + "a" * 33, "mem-" + "a" * 32):
        assert not is_memory_id(bad)
    assert not is_memory_id("mem_" + "a" * 32 + "\n")


@given(st.one_of(st.none(), st.text(max_size=40)))
def test_language_normalisation(value: str | None) -> None:
    result = normalize_language(value)
    if value is None:
        assert result == "und"
        return
    candidate = value.strip().lower()
    valid = (
        len(candidate) <= 35
        and candidate.isascii()
        and re.fullmatch(r"[a-z]{2,8}(-[a-z0-9]{1,8})*", candidate) is not None
    )
    assert result == (candidate if valid else None)


def test_language_examples() -> None:
    assert normalize_language("  EN-us ") == "en-us"
    assert normalize_language("zh-Hant-TW") == "zh-hant-tw"
    assert normalize_language("e") is None
    assert normalize_language("en_US") is None
    assert normalize_language(3) is None


@given(st.text())
def test_text_normalisation_is_idempotent_and_canonical(value: str) -> None:
    once = normalize_text(value)
    assert normalize_text(once) == once
    assert "\r" not in once
    assert once == once.strip()
    assert unicodedata.is_normalized("NFC", once)


def test_text_normalisation_line_endings() -> None:
    assert normalize_text("  a\r\nb\rc \n") == "a\nb\nc"
    assert normalize_text("e\u0301") == "\u00e9"


@given(st.lists(st.text(max_size=60), max_size=12))
def test_tag_normalisation_properties(values: list[str]) -> None:
    result = normalize_tags(values, minimum=0)
    collapsed = [" ".join(unicodedata.normalize("NFC", v).split()) for v in values]
    keys = [c.casefold() for c in collapsed]
    valid = (
        len(values) <= 10
        and all(1 <= len(c) <= 50 for c in collapsed)
        and len(set(keys)) == len(keys)
    )
    if not valid:
        assert result is None
    else:
        assert result == tuple(collapsed)


def test_tag_examples() -> None:
    assert normalize_tags(["  rainy   day ", "Weekend"], minimum=1) == ("rainy day", "Weekend")
    assert normalize_tags(["a", "A"], minimum=1) is None
    assert normalize_tags([], minimum=1) is None
    assert normalize_tags([], minimum=0) == ()
    assert normalize_tags("tag", minimum=0) is None
    assert normalize_tags([1], minimum=0) is None


@given(st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31)))
def test_timestamps_round_trip(moment: datetime) -> None:
    text = format_timestamp(moment.replace(tzinfo=UTC))
    assert is_timestamp(text)
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z", text)


@given(st.text(max_size=25))
def test_arbitrary_text_is_rarely_a_timestamp(value: str) -> None:
    if is_timestamp(value):
        assert datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ")


def test_timestamp_edges() -> None:
    assert is_timestamp("2026-07-18T12:00:00Z")
    for bad in (
        "2026-07-18T12:00:00.5Z",
        "2026-07-18T12:00:00+00:00",
        "2026-02-30T12:00:00Z",
        "2026-07-18 12:00:00Z",
        "2026-07-18T24:00:00Z",
        "2026-07-18T12:00:60Z",
        "\uff12\uff10\uff12\uff16-07-18T12:00:00Z",  # full-width digits
        20260718,
    ):
        assert not is_timestamp(bad)
    assert is_timestamp(utc_now_seconds())
