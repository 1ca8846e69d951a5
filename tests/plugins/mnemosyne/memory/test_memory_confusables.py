"""The table of lookalike characters the content policy folds to ASCII.

Every entry must be a real character the running interpreter knows, one the reading
would not already decide by other means, and a lookalike of the character it reads as.
That last part is checked by name where a name says it: every Latin, Greek and Cyrillic
entry names a letter, and that letter is drawn like its reading. Whether the policy
refuses secrets spelled with these characters is checked in
``test_memory_content_policy.py``, which draws its disguises from this table.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter

import pytest

from mymcp.plugins.mnemosyne.memory import PolicyReason, find_disallowed
from mymcp.plugins.mnemosyne.memory.policy import confusable_names, confusables

TOKEN_ALPHABET = set(string.ascii_letters + string.digits + "-_./+=:~'")
LOOKALIKES = confusables("lookalikes")
SECOND = confusables("second readings")

# Latin, Greek and Cyrillic letter names (after "LETTER" and an optional "SMALL CAPITAL")
# and the ASCII characters, lower-cased, that letter is drawn like. A lone Latin letter,
# with or without a hook or stroke, is drawn like itself unless listed here.
DRAWN_LIKE = {
    # Cyrillic
    "A": "a",
    "ABKHASIAN CHE": "e",
    "ABKHASIAN DZE": "3",
    "BE": "6",
    "BYELORUSSIAN-UKRAINIAN I": "il",
    "DZE": "s",
    "EM": "m",
    "EN": "h",
    "ER": "p",
    "ES": "c",
    "GHE": "r",
    "HA": "x",
    "IE": "e",
    "IZHITSA": "v",
    "JE": "j",
    "KA": "k",
    "KOMI DE": "d",
    "KOMI SJE": "g",
    "O": "o0",
    "OMEGA": "w",
    "PALOCHKA": "il",
    "PE": "n",
    "QA": "q",
    "REVERSED DZE": "2",
    "SHHA": "h",
    "SOFT SIGN": "b",
    "STRAIGHT U": "y",
    "TE": "t",
    "U": "y",
    "VE": "b",
    "WE": "w",
    "ZE": "3",
    # Greek (and Latin letters borrowed from it)
    "ALPHA": "a",
    "BETA": "b",
    "CHI": "x",
    "DIGAMMA": "f",
    "EPSILON": "e",
    "ETA": "h",
    "GAMMA": "ry",
    "IOTA": "il",
    "KAPPA": "k",
    "MU": "m",
    "NU": "nv",
    "OMICRON": "o0",
    "RHO": "p",
    "SAN": "m",
    "SIGMA": "o",
    "TAU": "t",
    "UPSILON": "yu",
    "YOT": "j",
    "ZETA": "z",
    # Latin letters that are not a plain Latin letter
    "BLACKLETTER E": "e",
    "BLACKLETTER O": "o",
    "CON": "9",
    "DENTAL CLICK": "il",
    "DOTLESS I": "i",
    "DOTLESS J": "j",
    "DOUBLE R": "r",
    "ET": "3",
    "EZH": "3",
    "KRA": "k",
    "LENIS F": "f",
    "LONG S WITH HIGH STROKE": "f",
    "OU": "8",
    "R ROTUNDA": "2",
    "R WITHOUT HANDLE": "r",
    "REVERSED OPEN E": "3",
    "SALTILLO": "'",
    "SCRIPT G": "g",
    "SIDEWAYS O": "o",
    "TONE FIVE": "5s",
    "TONE SIX": "b",
    "TONE TWO": "2",
    "TURNED DELTA": "g",
    "TURNED M": "w",
    "V WITH HOOK": "u",
    "V WITH PALATAL HOOK": "y",
    "VOLAPUK UE": "u",
    "YOGH": "3",
    "YR": "r",
}
LETTER = re.compile(
    r"(?P<script>LATIN|GREEK|CYRILLIC) (?:(?:CAPITAL|SMALL) )?LETTER (?:SMALL CAPITAL )?"
    r"(?P<letter>.+)"
)
PLAIN_LATIN = re.compile(r"(?P<letter>[A-Z])(?: WITH .+)?")


def _drawn_like(name: str) -> str | None:
    """What a Latin, Greek or Cyrillic letter is drawn like, by its name; None for other
    scripts and symbols."""
    match = LETTER.fullmatch(name)
    if match is None:
        return None
    letter = match["letter"]
    plain = PLAIN_LATIN.fullmatch(letter)
    # Single-letter names in this table are Cyrillic ones ("U" is drawn like a y there).
    latin = match["script"] == "LATIN" and (len(letter) == 1 or letter not in DRAWN_LIKE)
    if latin and plain is not None:
        return {"I": "il", "O": "o0"}.get(plain["letter"], plain["letter"].lower())
    assert letter in DRAWN_LIKE, f"{name}: add what it is drawn like"
    return DRAWN_LIKE[letter]


def test_every_entry_is_a_character_the_reading_needs_the_table_for() -> None:
    for char, plain in LOOKALIKES.items():
        name = unicodedata.name(char)
        assert not char.isascii(), name
        assert plain in TOKEN_ALPHABET, name
        # NFKC runs first: an entry it changes would never be looked up.
        assert unicodedata.normalize("NFKC", char) == char, name
        # Dropped and blank characters, decimal digits (read by value) and dashes (read
        # as "-") are decided by their category, unless a dash is drawn like "=".
        category = unicodedata.category(char)
        assert category not in {"Cc", "Cf", "Cn", "Mn", "Me", "Zs", "Zl", "Zp", "Nd"}, name
        assert category != "Pd" or plain != "-", name


def test_no_name_is_listed_twice() -> None:
    for table in confusable_names().values():
        names = Counter(name for listed in table.values() for name in listed)
        assert [name for name, count in names.items() if count > 1] == []


def test_every_two_way_glyph_has_a_different_first_reading() -> None:
    for char, second in SECOND.items():
        name = unicodedata.name(char)
        first = str(unicodedata.decimal(char)) if char not in LOOKALIKES else LOOKALIKES[char]
        assert second != first, name
        assert second in TOKEN_ALPHABET, name


def test_latin_greek_and_cyrillic_entries_name_the_letter_they_pass_for() -> None:
    checked = 0
    for char, plain in LOOKALIKES.items():
        name = unicodedata.name(char)
        drawn_like = _drawn_like(name)
        if drawn_like is None:
            continue
        checked += 1
        assert plain.lower() in drawn_like, name
        if char in SECOND:
            assert SECOND[char].lower() in drawn_like, name
    assert checked >= 140  # the Latin, Greek and Cyrillic part of the table


@pytest.mark.parametrize("char", sorted(LOOKALIKES))
def test_each_lookalike_reads_as_its_character_inside_a_token(char: str) -> None:
    plain = LOOKALIKES[char]
    # npm tokens are exactly 36 letters and digits: a lookalike dropped or misread as
    # punctuation leaves the token one short.
    if plain.isalnum():
        body = "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dE3fG"
        assert find_disallowed(f"npm_{body}{plain} end") is PolicyReason.CREDENTIAL_SHAPE
        assert find_disallowed(f"npm_{body}{char} end") is PolicyReason.CREDENTIAL_SHAPE
    else:
        # Tokens that need the punctuation mark: dropped or left unfolded, it breaks them.
        text = {
            "-": "glpat-abcdefghij0123456789",
            "_": "ghp_" + "a1B2" * 9,
            ".": "ya29." + "a1" * 12,
            "/": "hooks.slack.com/services/T0000000000/B000000000/aaaaaaaaaaaaaaaa",
            "+": "?sig=" + "a+" * 15,
            "=": "api_key=abcd1234",
            ":": "https://user:s3cret@host",
            "~": "abc8Q~" + "a" * 32,
            "'": "my password's hunter22",
        }[plain]
        assert plain in text
        assert find_disallowed(text) is PolicyReason.CREDENTIAL_SHAPE
        assert find_disallowed(text.replace(plain, char)) is PolicyReason.CREDENTIAL_SHAPE
