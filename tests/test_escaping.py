"""What a person reads: invisible and reordering characters are written out."""

from __future__ import annotations

import json
import unicodedata

from hypothesis import given
from hypothesis import strategies as st

from mymcp._escaping import escape_invisible, json_for_terminal

ESCAPED = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
HOSTILE = "\x1b[31mRED\x1b[0m\x1b]0;pwned\x07"


def _invisible(text: str) -> list[str]:
    return [char for char in text if unicodedata.category(char) in ESCAPED]


@given(st.text())
def test_escaped_text_holds_no_invisible_character(text: str) -> None:
    assert _invisible(escape_invisible(text)) == []
    assert set(_invisible(escape_invisible(text, keep_layout=True))) <= {"\n", "\t"}


@given(st.text(st.characters(exclude_categories=tuple(ESCAPED))))
def test_visible_text_is_left_as_it_is(text: str) -> None:
    assert escape_invisible(text) == text
    assert json.loads(json_for_terminal(text)) == text


@given(st.text(), st.characters(categories=tuple(ESCAPED - {"Cs"})))
def test_each_escaped_character_is_written_as_its_code(text: str, char: str) -> None:
    code = ord(char)
    if code < 0x100:
        escape = f"\\x{code:02x}"
    elif code < 0x10000:
        escape = f"\\u{code:04x}"
    else:
        escape = f"\\U{code:08x}"
    assert escape_invisible(text + char) == escape_invisible(text) + escape


def test_examples() -> None:
    assert escape_invisible(HOSTILE) == "\\x1b[31mRED\\x1b[0m\\x1b]0;pwned\\x07"
    assert escape_invisible("a\tb\nc\r\x7f\x9b") == "a\\x09b\\x0ac\\x0d\\x7f\\x9b"
    assert escape_invisible("a\tb\nc\r", keep_layout=True) == "a\tb\nc\\x0d"
    assert escape_invisible("\u200e\u200f\u202a\u202e\u2066\u2069\u2028") == (
        "\\u200e\\u200f\\u202a\\u202e\\u2066\\u2069\\u2028"
    )
    assert escape_invisible("tag \U000e0041") == "tag \\U000e0041"
    assert escape_invisible("\udcff") == "\\udcff"  # an undecodable file name byte
    assert escape_invisible("\ue000 \U000f0000") == "\\ue000 \\U000f0000"  # private use
    kept = "caf\u00e9 \\x1b \u00a0 \U0001f600"
    assert escape_invisible(kept) == kept


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


@given(json_values, st.sampled_from([None, 2]))
def test_json_for_terminal_reads_as_the_same_value_and_shows_nothing_invisible(
    value: object, indent: int | None
) -> None:
    text = json_for_terminal(value, indent=indent)
    assert json.loads(text) == value
    layout = {"\n"} if indent is not None else set()
    assert set(_invisible(text)) <= layout
    # It still prints on any UTF-8 terminal: no lone surrogate survives.
    text.encode("utf-8")


def test_json_for_terminal_keeps_readable_text_and_escapes_the_rest() -> None:
    value = {"title": "caf\u00e9 \u65e5\u672c \U0001f600", "sneaky": "abc\u202eevil\x7f\U000e0041"}
    text = json_for_terminal(value)
    assert "caf\u00e9 \u65e5\u672c \U0001f600" in text
    assert '"abc\\u202eevil\\u007f\\udb40\\udc41"' in text
    assert json.loads(text) == value
