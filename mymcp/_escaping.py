"""Text a person reads, with every invisible or reordering character written out.

Memory text, tool arguments and principals are written by agents and clients, and an
operator reads them on a terminal or a console page. A control character can send the
terminal an escape sequence (clear the screen, retitle the window); a format character
such as U+202E reverses what follows, and a zero-width one hides where a name differs;
the line and paragraph separators break one line into two. So those characters are
shown as escapes, never sent as they are.

Escaped are: controls (C0, DEL, C1), format characters, surrogates (no terminal
encoding holds them), private-use and unassigned code points (a newer Unicode may make
them format characters), the line and paragraph separators, and the rest of Unicode's
default-ignorable characters, which draw nothing though they are marks or letters: the
variation selectors (256 of them can carry any bytes unseen), the combining grapheme
joiner and the Hangul fillers. So are the two symbols whose glyph is empty by design,
the blank Braille pattern and the musical null notehead, which pass for a space or for
nothing. Everything else, the backslash included, is left as it is.
"""

from __future__ import annotations

import json
import re
import unicodedata
from typing import Any, Final

__all__ = ["draws_nothing", "escape_invisible", "is_visible_ascii", "json_for_terminal"]

_INVISIBLE_CATEGORIES: Final = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
# The default-ignorable code points (Unicode's DerivedCoreProperties) outside those
# categories: combining grapheme joiner, Hangul fillers, Khmer inherent vowels, Mongolian
# and standard variation selectors, and the variation selectors supplement. Then the
# symbols whose glyph is empty: the blank Braille pattern and the musical null notehead.
_IGNORABLE: Final = re.compile(
    "[\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180d\u180f\u3164\ufe00-\ufe0f\uffa0"
    "\U000e0100-\U000e01ef\u2800\U0001d159]"
)
# Printable ASCII is never escaped: only the other characters are looked at one by one.
_BEYOND_PRINTABLE_ASCII: Final = re.compile(r"[^\x20-\x7e]")
_BEYOND_PRINTABLE_ASCII_OR_LAYOUT: Final = re.compile(r"[^\x20-\x7e\n\t]")


def _is_invisible(char: str) -> bool:
    return unicodedata.category(char) in _INVISIBLE_CATEGORIES or bool(_IGNORABLE.match(char))


# What draws nothing for certain. Unassigned code points (a newer Unicode's emoji) and
# private-use ones (a font's glyphs) are escaped for safety, but may well show.
_BLANK_CATEGORIES: Final = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def draws_nothing(text: str) -> bool:
    """Whether `text` shows nothing at all: only whitespace, controls, format characters,
    the default-ignorable ones and empty glyphs (stops at the first other one, usually
    the first)."""
    return all(
        char.isspace()
        or unicodedata.category(char) in _BLANK_CATEGORIES
        or _IGNORABLE.match(char) is not None
        for char in text
    )


def _readable_escape(match: re.Match[str]) -> str:
    char = match.group()
    if not _is_invisible(char):
        return char
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def escape_invisible(text: str, *, keep_layout: bool = False) -> str:
    """`text` with each invisible character written as `\\x1b`, `\\u202e` or
    `\\U000e0001`. With `keep_layout`, newlines and tabs stay (a page that shows a
    multi-line value); otherwise they are escaped too (a one-line listing)."""
    if text.isascii() and text.isprintable():  # the usual case, at C speed
        return text
    pattern = _BEYOND_PRINTABLE_ASCII_OR_LAYOUT if keep_layout else _BEYOND_PRINTABLE_ASCII
    return pattern.sub(_readable_escape, text)


def _json_escape(match: re.Match[str]) -> str:
    char = match.group()
    if not _is_invisible(char):
        return char
    code = ord(char)
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000  # JSON writes a character beyond the first plane as a surrogate pair
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


# Inside JSON text every C0 control is already an escape, and whitespace between tokens
# is ASCII; so only characters beyond ASCII, and DEL, can still need one.
_BEYOND_ASCII_OR_DEL: Final = re.compile(r"[^\x00-\x7e]")


def json_for_terminal(value: Any, *, indent: int | None = None) -> str:
    """`value` as JSON that reads the same to any JSON parser, with each invisible
    character inside a string written as a `\\uXXXX` escape and every other character
    (accented letters, other scripts, emoji) left readable."""
    text = json.dumps(value, ensure_ascii=False, indent=indent)
    if text.isascii() and "\x7f" not in text:
        return text
    return _BEYOND_ASCII_OR_DEL.sub(_json_escape, text)


def is_visible_ascii(text: str) -> bool:
    """Non-empty and only 0x21-0x7E: what a protocol token (a header value, a key id, an
    issuer) may hold, so that it shows as itself wherever it is written: no control, no
    DEL, no space, nothing beyond ASCII."""
    return bool(text) and text.isascii() and text.isprintable() and " " not in text
