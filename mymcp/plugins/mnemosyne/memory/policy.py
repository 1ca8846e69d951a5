"""The bounded content policy shared by remember and revise.

Signature detection, not data-loss prevention: five families recognise the *shapes* of
private keys, credentials, compact JOSE tokens, US social-security numbers and payment
cards. Every checked field is tested against every family in a fixed order and only the
first match is reported, as a public field name plus one reason word. The matched value,
its offset and the detector that fired never leave this module.

What the detectors see
    Matching runs on *readings* of the text; the stored text is never changed. A reading
    is the text as a person sees it: NFKC (fullwidth, mathematical, circled and
    superscript forms become plain ones), accented letters read as their base letter,
    format characters (zero-width space and joiners, soft hyphen, BOM, bidi controls, tag
    characters), combining marks, variation selectors, control characters, code points
    the interpreter's Unicode tables do not know, and the characters that render as
    (almost) nothing although Unicode files them otherwise (hair space, Braille blank,
    Hangul fillers) dropped; every lookalike of an ASCII letter, digit or token
    punctuation mark in Unicode's confusables data (``confusables.txt``: Cyrillic, Greek,
    Armenian, Cherokee, Canadian syllabics, Lisu, Latin extensions, symbols, ...), other
    scripts' decimal digits and dashes folded to ASCII.

    A glyph that passes for two characters (a Greek capital iota for I or l, a Cyrillic
    capital O for O or 0, a Bengali four for 4 or 8) reads as the first, and a second
    reading takes the other for all of them at once. The no-break space is an ordinary
    space; any other blank (thin, en, em, ideographic and the other typographic spaces,
    line and paragraph separators) reads as a space and, in another reading of the word
    and token detectors, as nothing, since it may stand between two words or hide inside
    a token. That reading, where words may be glued together, is not checked for
    sentences such as "my password is ..."; the card detector takes a blank for a
    separator. Text smuggled entirely in Unicode tag characters is decoded and checked as
    well. A secret split by invisible characters or blanks, or spelled with lookalikes, is
    therefore refused exactly like the plain one: nothing an invisible character hides
    can be stored.

What is caught
    * private keys: PEM and PGP "BEGIN ... PRIVATE KEY" armour in any letter case and with
      any key-type words, PuTTY key-file headers, OpenSSH key bodies (their base64 magic)
      and age secret keys;
    * credentials: AWS access-key ids; GitHub classic and fine-grained, GitLab, npm, Slack (tokens
      and webhooks), Stripe, Google (API keys, OAuth client secrets and access tokens), Azure AD
      client secrets and SAS signatures, Twilio, SendGrid, OpenAI, Anthropic, Hugging Face, PyPI,
      Docker Hub, DigitalOcean, Shopify and Databricks tokens; MyMCP's own operator tokens;
      ``Authorization: Basic`` / ``Bearer`` header text and long bearer values; URLs with
      ``user:password@``; key=value and key: value pairs (the value on the same line or the next,
      any letter case, the key anywhere in an identifier such as DB_PASSWORD, aws_secret_access_key
      or clientSecret) whose key names a password, passphrase, secret, API key,
      access/refresh/auth/session token or Azure account/shared access key and whose value has four
      or more characters, unless the value plainly refers to a secret kept elsewhere (``${VAR}``,
      ``{{ template }}``, ``<placeholder>``, a call or subscript such as ``os.environ["X"]``, a
      variable or attribute name such as ``auth_token`` or ``self.secret``, a ``****`` mask), the
      identifier names something about the secret (MAX_PASSWORD_LENGTH, PASSWORD_FILE), or the key
      sits inside a longer identifier and the unquoted value is a type, keyword or common variable
      name (``aws_secret_access_key=None``); keys naming any other token, a signature or
      ``something_key`` when the value has sixteen or more characters mixing letters and digits; and
      prose such as "my password is hunter2", "password for the router: Xk9!mq2z", "my password's
      hunter2x" or "my api key is abcd1234efgh5678". The code and prose rules are heuristics: a bare
      key (``password: ...``) refuses any other value of four or more characters; after "password
      is" any quoted value of four or more characters is a password and so is a word that does not
      read as English (a word of three letters or fewer, a listed word such as "correct" or
      "required", or one ending like a participle, adverb or adjective, "-ed", "-ing", "-ly",
      "-able", "-ous", ...); after words with everyday senses ("my secret is", "the token is", "the
      password's") only a value that looks like a secret is one: six or more characters mixing
      letters with digits or symbols, or with letter case changing inside the word.
    * compact JOSE tokens: three dot-separated base64url segments, the first a JSON
      header starting ``eyJ``;
    * US social-security numbers: 3-2-4 with hyphens, always; 3-2-4 with single spaces or
      dots when the number could have been issued (area not 000, 666 or 9xx, group not 00,
      serial not 0000); and 3-2-4 with any or no separators, the nine-digit undashed form
      included, a few characters after "SSN", "social security" or "soc sec". A bare
      nine-digit number is not refused: order numbers, phone numbers and ids have that
      shape far more often than SSNs do, and the label is what makes it plausible.
    * payment cards: 13-19 digits passing the Luhn check, written as one unbroken group
      (unless next to a lone dot: a decimal fraction), in groups of four with a shorter
      last group, as 4-6-5 or 4-6-4, or in equal groups of one, two or three digits (the
      usual obfuscations). Between groups any run of up to three
      separators is accepted (spaces of every kind, hyphens and other dashes, dots,
      slashes, underscores, mixed freely); equal small groups must use one kind of
      separator throughout. The layouts keep dates, versions, IP addresses and phone
      numbers out; groups of four that are all years 1900-2099 are a list of years, and a
      digit group glued to a letter belongs to a word, identifier or hex digest. A digit
      run with a hidden character in it is judged by its digits alone, since the hidden
      character may stand where a separator was.

What is not caught
    Secrets with no recognisable shape (a random string with no key, prefix or "password
    is" before it), secrets broken up by visible characters, spelled out, encoded
    (base64, hex, ROT13) or written with digit-for-letter swaps, and anything glued to
    surrounding letters where a detector needs a word boundary to stay quiet on ordinary
    text (a legacy ``sk-`` key or a card number directly after a letter). Nor are a few
    spellings the readings cannot undo: one text using a two-way glyph both ways (a Greek
    capital iota for the I and for the l of one token) or one outside the basic plane
    its second way (``confusables.txt`` says why), a digit 1 written as a letter I or
    l lookalike, private-use characters (a font may draw them as anything), a secret split
    by a no-break space (which reads as the space it looks like), one text using blanks
    both between words and inside a secret (all of them read one way; no-break spaces
    between the words are fine), a blank inside the password of a sentence ("my
    password is hun\u2009ter2"), and a card number with a blank inside a digit group
    (both read the blank as the gap it shows).

Ordinary text stays storable: versions, dates, times, IP addresses, hostnames, module
paths, phone numbers, ISBNs and other numbers that fail Luhn or the card layouts, hex
digests, URLs without userinfo, code that reads secrets from elsewhere, and prose about
passwords or tokens.

Cost
    Every pattern starts with a literal (or a one-character class) and uses only bounded
    repetitions, repetitions over classes disjoint from what follows them, or a part
    captured once by a lookahead, so a failed attempt costs bounded work and each field
    is checked in time linear in its length. A field has at most four readings (the
    second reading, each with blanks read both ways) and a tag payload, so the readings
    multiply that cost by a small constant. Card windows are Luhn-checked as one slice
    sum over precomputed per-digit weights. ``bench/content_policy.py`` measures the worst
    cases.
"""

from __future__ import annotations

import functools
import operator
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from importlib.resources import files
from itertools import accumulate, repeat
from typing import Final

from .model import ErrorCode, MemoryOperationError

__all__ = ["PolicyReason", "enforce_content_policy", "find_disallowed"]


class PolicyReason(StrEnum):
    """The fixed reason vocabulary of a ``disallowed_content`` refusal."""

    PRIVATE_KEY_SHAPE = "private_key_shape"
    CREDENTIAL_SHAPE = "credential_shape"
    COMPACT_TOKEN_SHAPE = "compact_token_shape"  # noqa: S105 - a reason word
    GOVERNMENT_IDENTIFIER_SHAPE = "government_identifier_shape"
    PAYMENT_CARD_SHAPE = "payment_card_shape"


# --- the reading the detectors match ------------------------------------------------------

# Dropped characters leave ``_MARK`` in a reading; the card detector sees the marks (a
# digit run with hidden characters in it is judged by its digits alone), every other
# detector sees the reading with them removed. NUL itself is a dropped control character.
_MARK: Final = "\x00"
# Blanks other than the ASCII and no-break spaces leave ``_BLANK``: a noncharacter, so
# NFKC keeps it and no text means it. The detectors of words and tokens see each reading
# twice, the blank read as a space and as nothing (it may sit inside a token or between
# words); the card detector reads it as a separator.
_BLANK: Final = "\ufdd0"

# The categories dropped: format and control characters, combining marks, and code points
# this interpreter's Unicode tables do not know (a newer version may have made them format
# characters). ASCII control characters other than tab and line ends are dropped as well.
_DROPPED_CATEGORIES: Final = frozenset({"Cc", "Cf", "Mn", "Me", "Cn"})
# Blanks: spaces, line and paragraph separators; but the no-break space is an ordinary
# space, typed between words by editors and keyboards (Option-Space, French typography).
_BLANK_CATEGORIES: Final = frozenset({"Zs", "Zl", "Zp"})
_NO_BREAK_SPACE: Final = 0xA0
# Characters that render as (almost) nothing, or as a blank no text uses between words,
# although their category says otherwise: the hair space, the Braille blank and the
# Hangul fillers. They are dropped like format characters.
_INVISIBLE_LETTERS: Final = "\u200a\u2800\u115f\u1160\u3164\uffa0"
# Tag characters spell ASCII invisibly: U+E0020..U+E007E mirror U+0020..U+007E.
_TAG_OFFSET: Final = 0xE0000
_TAG_RUN: Final = re.compile("[\U000e0020-\U000e007e]+")
# Everything above the two first planes is dropped wholesale in the special-purpose
# plane (tags, variation selectors) and left alone elsewhere (CJK ideographs and private
# use).
_SCANNED_PLANES: Final = range(0x80, 0x20000)
_SPECIAL_PURPOSE_PLANE: Final = range(0xE0000, 0xE1000)


@dataclass(frozen=True, slots=True)
class _Folding:
    """How the readings are made, built once from Unicode's tables.

    Each table comes with a pattern finding any character it changes.
    """

    # Blanks and invisible letters, marked before NFKC (which turns most of them into an
    # ASCII space or another filler).
    early: dict[int, str]
    any_early: re.Pattern[str]
    # After NFKC: every character the reading changes or drops, but the two-way glyphs.
    table: dict[int, str]
    applies: re.Pattern[str]
    # The glyphs that pass for two ASCII characters, to their first and second reading.
    first: dict[int, str]
    second: dict[int, str]
    two_way: re.Pattern[str]


def _fold_letters(text: str, lookalikes: dict[int, str]) -> str:
    """``text`` decomposed, without its marks, lookalikes folded (used to build tables)."""
    decomposed = unicodedata.normalize("NFKD", text)
    bare = "".join(c for c in decomposed if unicodedata.category(c) not in _DROPPED_CATEGORIES)
    return bare.translate(lookalikes)


def _any_of(codes: Iterable[int]) -> re.Pattern[str]:
    """A pattern finding any of ``codes``, and every astral character if one is astral.

    A class over the basic plane compiles to a bitmap; astral characters in it would make
    every test a linear search.
    """
    codes = sorted(codes)
    basic = "".join(re.escape(chr(code)) for code in codes if code <= 0xFFFF)
    astral = "|[\U00010000-\U0010ffff]" if codes and codes[-1] > 0xFFFF else ""
    return re.compile(f"[{basic}]{astral}")


@functools.cache
def confusable_names() -> dict[str, dict[str, list[str]]]:
    """The lookalike table of ``confusables.txt``: section -> ASCII character -> names.

    A data file rather than code, so that a reviewer reads one line per ASCII character,
    and so the table costs nothing until the first non-ASCII text is folded.
    """
    sections: dict[str, dict[str, list[str]]] = {}
    section: dict[str, list[str]] = {}
    text = files(__package__).joinpath("confusables.txt").read_text(encoding="utf-8")
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            section = sections.setdefault(line.strip("[]"), {})
            continue
        plain, _, names = line.partition("\t")
        section[plain] = names.split(", ")
    return sections


def confusables(section: str) -> dict[str, str]:
    """Each character listed in one section (``lookalikes``, ``second readings``) and the
    ASCII character it reads as there."""
    return {
        unicodedata.lookup(name): plain
        for plain, names in confusable_names()[section].items()
        for name in names
    }


@functools.cache
def _folding() -> _Folding:
    """Built on first use (a few tens of milliseconds) from the interpreter's Unicode tables."""
    lookalikes = {ord(char): plain for char, plain in confusables("lookalikes").items()}
    table = dict.fromkeys(_SPECIAL_PURPOSE_PLANE, _MARK)
    table.update(dict.fromkeys(_ASCII_CONTROL_CODES, _MARK))
    spaces = []
    for code in _SCANNED_PLANES:
        char = chr(code)
        category = unicodedata.category(char)
        if category in _DROPPED_CATEGORIES:
            table[code] = _MARK
        elif category in _BLANK_CATEGORIES:
            if code != _NO_BREAK_SPACE:  # NFKC makes it an ASCII space
                table[code] = _BLANK
                spaces.append(code)
        elif category == "Nd":
            table[code] = str(unicodedata.decimal(char))
        elif category == "Pd":
            table[code] = "-"
        elif unicodedata.decomposition(char):
            # Accented letters NFKC keeps composed (é, Ấ, ё) read as their base letter.
            base = _fold_letters(char, lookalikes)
            if base.isascii() and base:
                table[code] = base
    table.update(lookalikes)
    table.update(dict.fromkeys(map(ord, _INVISIBLE_LETTERS), _MARK))
    # The marks read as themselves, and so need no entry.
    del table[ord(_MARK)], table[ord(_BLANK)]
    early = {code: table[code] for code in (*spaces, *map(ord, _INVISIBLE_LETTERS))}
    second = {ord(char): plain for char, plain in confusables("second readings").items()}
    first = {code: table.pop(code) for code in second}
    return _Folding(
        early=early,
        any_early=_any_of(early),
        table=table,
        applies=_any_of(table),
        first=first,
        second=second,
        two_way=_any_of(second),
    )


_ASCII_CONTROL_CODES: Final = (*range(0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F)
_ASCII_CONTROL_TO_MARK: Final = dict.fromkeys(_ASCII_CONTROL_CODES, ord(_MARK))
_TAG_TO_ASCII: Final = {code: code - _TAG_OFFSET for code in range(0xE0020, 0xE007F)}


def _readings(text: str) -> list[str]:
    """The text as read (see the module docstring): the reading, its second reading when
    the text holds glyphs that pass for two ASCII characters, and any tag-character
    payload.

    Characters the reading drops are left as ``_MARK``, blanks as ``_BLANK``.
    """
    if text.isascii():
        return [text.translate(_ASCII_CONTROL_TO_MARK)]
    folding = _folding()
    hidden = "".join(_TAG_RUN.findall(text))
    text = _translated(text, folding.any_early, folding.early)
    # Two-way glyphs are left as they are by the table, so one translation of the text
    # serves both readings.
    read = _translated(unicodedata.normalize("NFKC", text), folding.applies, folding.table)
    readings = [read]
    if folding.two_way.search(read):
        readings = [
            _translated(read, folding.two_way, folding.first),
            _translated(read, folding.two_way, folding.second),
        ]
    if hidden:  # decoded, the payload is printable ASCII and needs no folding
        readings.append(hidden.translate(_TAG_TO_ASCII))
    return readings


# Up to this many distinct characters to change, replacing each in turn is faster than
# translating the text through a table of tens of thousands of entries.
_FEW_CHARACTERS: Final = 12


def _translated(text: str, changed: re.Pattern[str], table: Mapping[int, str]) -> str:
    """``text.translate(table)``, where ``changed`` finds every character the table
    changes (and possibly others, which send the text through the table)."""
    position = 0
    for _ in range(_FEW_CHARACTERS):
        found = changed.search(text, position)
        if found is None:
            return text
        char = found.group()
        value = table.get(ord(char))
        if value is None:  # found but unlisted, an astral character
            break
        # Every value is ASCII or a mark, which no pattern finds: the replaced character
        # is gone, and the search resumes where it stood.
        text = text.replace(char, value)
        position = found.start()
    return text.translate(table)


def _visible(reading: str) -> tuple[str, str | None]:
    """What the word and token detectors see of one reading: marks removed, each blank
    read as a space and, when there are blanks, separately as nothing."""
    visible = reading.replace(_MARK, "")
    if _BLANK in visible:
        return visible.replace(_BLANK, " "), visible.replace(_BLANK, "")
    return visible, None


# --- shapes -------------------------------------------------------------------------------

# Every pattern starts with a literal, so the regular-expression engine skips ahead with a
# fast substring search instead of trying each position; a word boundary that must hold
# before the literal is checked with a lookbehind placed after it. After the literal,
# repetitions are bounded or run over classes disjoint from what follows them, so a
# failed attempt costs a bounded amount of work and the whole search stays linear.


@dataclass(frozen=True, slots=True)
class _Shape:
    """One pattern, the reading it runs on, and an optional judgement of its value."""

    pattern: re.Pattern[str]
    lowered: bool = False  # match the lower-cased reading (keys and prose in any case)
    # Judges a match, given the reading in its own letter case, when set.
    accepts: Callable[[re.Match[str], str], bool] | None = None


def _shape(
    pattern: str,
    *,
    lowered: bool = False,
    accepts: Callable[[re.Match[str], str], bool] | None = None,
) -> _Shape:
    return _Shape(re.compile(pattern, re.ASCII), lowered, accepts)


def _value(match: re.Match[str], reading: str) -> str:
    """The ``value`` group as the reading spells it (the lower-cased one has its offsets)."""
    return reading[match.start("value") : match.end("value")]


# --- private keys -------------------------------------------------------------------------

_PRIVATE_KEY_SHAPES: Final = (
    # Armour: two or more dashes, BEGIN, up to three key-type words, PRIVATE KEY. Words and
    # blanks are disjoint classes, so the bounded repetitions cannot backtrack badly.
    _shape(
        r"begin(?:(?<=--begin)|(?<=--[ \t]begin)|(?<=--[ \t]{2}begin))[ \t]{1,4}"
        r"(?:[a-z0-9]{1,16}[ \t]{1,4}){0,3}private[ \t]{1,4}key",
        lowered=True,
    ),
    _shape(r"putty-user-key-file-[0-9]{1,3}[ \t]{0,4}:", lowered=True),
    _shape(r"b3BlbnNzaC1rZXktdjE"),  # base64 of "openssh-key-v1", the OpenSSH key body
    _shape(r"AGE-SECRET-KEY-1[0-9A-Z]{58}"),
)

# --- credentials --------------------------------------------------------------------------

_VENDOR_TOKENS: Final = (
    r"AKIA[A-Z0-9]{16}",  # AWS access-key ids
    r"ASIA[A-Z0-9]{16}",  # AWS temporary access-key ids
    r"gh[pousr]_[A-Za-z0-9]{20,}",  # GitHub classic
    r"github_pat_[A-Za-z0-9_]{20,}",  # GitHub fine-grained
    r"gl(?:pat|dt|rt|ptt|ft|imt|oas|soat|cbt|agent)-[A-Za-z0-9_-]{20,}",  # GitLab
    r"GR1348941[A-Za-z0-9_-]{20,}",  # GitLab runner registration
    r"npm_[A-Za-z0-9]{36}",  # npm
    r"xox[abposre]-[A-Za-z0-9-]{10,}",  # Slack
    r"xapp-[0-9]-[A-Za-z0-9-]{10,}",  # Slack app-level
    r"hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/]{20,}",  # Slack webhooks
    r"sk_(?:live|test)_[A-Za-z0-9]{10,}",  # Stripe secret keys
    r"rk_(?:live|test)_[A-Za-z0-9]{10,}",  # Stripe restricted keys
    r"whsec_[A-Za-z0-9]{20,}",  # Stripe webhook signing secrets
    r"AIza[A-Za-z0-9_-]{35}",  # Google API keys
    r"GOCSPX-[A-Za-z0-9_-]{20,}",  # Google OAuth client secrets
    r"ya29\.[A-Za-z0-9_-]{20,}",  # Google OAuth access tokens
    r"Q~(?<=[A-Za-z0-9_~.-]{3}[0-9]Q~)[A-Za-z0-9_~.-]{31,34}",  # Azure AD client secrets
    r"sig=(?<=[?&]sig=)[A-Za-z0-9%+/]{30,}",  # Azure SAS signatures
    r"SK(?<![A-Za-z0-9]SK)[0-9a-f]{32}(?![A-Za-z0-9])",  # Twilio API keys
    r"SG\.[A-Za-z0-9_-]{16,32}\.[A-Za-z0-9_-]{30,50}",  # SendGrid
    r"sk-ant-[A-Za-z0-9_-]{20,}",  # Anthropic
    r"sk-(?:proj|svcacct|admin)-[A-Za-z0-9_-]{20,}",  # OpenAI project and service keys
    # OpenAI-style keys: up to two short dash-separated prefixes, then a long unbroken
    # run, so prose such as "sk-learn-is-a-library" or "task-…" is not a key.
    r"sk-(?<![A-Za-z0-9]sk-)(?:[A-Za-z0-9]{1,10}-){0,2}[A-Za-z0-9_]{20,}",
    r"T3BlbkFJ(?<=[A-Za-z0-9_-]{10}T3BlbkFJ)[A-Za-z0-9_-]{10}",  # OpenAI's base64 marker
    r"hf_(?<![A-Za-z0-9_]hf_)[A-Za-z]{34}(?![A-Za-z0-9])",  # Hugging Face
    r"pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{20,}",  # PyPI upload tokens
    r"dckr_pat_[A-Za-z0-9_-]{20,}",  # Docker Hub
    r"do[por]_v1_[a-f0-9]{64}",  # DigitalOcean
    r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}",  # Shopify
    r"dapi(?<![A-Za-z0-9]dapi)[a-f0-9]{32}(?![A-Za-z0-9])",  # Databricks
    r"mymcp1\.[0-9A-Fa-f]{32}\.[A-Za-z0-9_-]{43}",  # MyMCP operator tokens
    # URLs carrying user:password userinfo, the user possibly empty. Neither part may
    # hold a slash, so the scan from one "://" ends before the next one.
    r"://(?<=[A-Za-z0-9]://)[^\s/@:?#]{0,256}:[^\s/@?#]{1,256}@",
)

# Key names (matched lower-cased, anywhere in an identifier: DB_PASSWORD, clientSecret),
# the rest of the identifier only after a separator (so "secretary" is no key), then an
# assignment and the value.
_JOIN: Final = r"[ _.-]?"
# The lookahead captures the rest greedily and the back-reference consumes it, so it is
# never backtracked into (what follows it cannot start with one of its characters
# anyway); dense key words would otherwise each cost forty failed attempts.
_KEY_REST: Final = r"(?=(?P<rest>(?:[_.-][a-z0-9_.-]{0,40})?))(?P=rest)"
# The value may start on the next line ("password:" and the value below it, as notes
# and YAML blocks put it).
_ASSIGN: Final = r"[\"']?[ \t]{0,4}(?::=|=>|[:=])[ \t]{0,4}(?:\n[ \t]{0,8})?(?P<quote>[\"'`]?)"
# A value ends at white space, a quote or a closing bracket, comma or semicolon (code
# such as "check(password: str)" is no assignment of "str)").
_VALUE: Final = r"[^\s\"'`,;)\]}]"
# A generated value ends at the next assignment, list separator or bracket.
_GENERATED: Final = r"[^\s\"'`=;&,|()<>\[\]{}]"
# Keys whose value is a secret however short (four characters or more).
_STRONG_KEYS: Final = (
    r"pass(?:word|wd|phrase|code)s?",
    r"pwd",
    r"secret(?:(?:access)?key)?",  # also aws_secret_access_key, SecretAccessKey, client_secret
    f"api{_JOIN}key",
    f"access{_JOIN}token",
    f"refresh{_JOIN}token",
    f"auth{_JOIN}token",
    f"session{_JOIN}token",
    f"shared{_JOIN}access{_JOIN}key",  # Azure connection strings
    f"account{_JOIN}key",  # Azure storage connection strings
)
# Keys that name a secret only sometimes (token, signature, something_key): the value
# must look generated, sixteen or more characters mixing letters and digits.
_WEAK_KEYS: Final = (
    r"token",
    r"sig(?:nature)?",
    r"key(?<=[a-z0-9][_.-]key)(?<!pub[_.-]key)(?<!public[_.-]key)",  # public keys are not
)


# Values that refer to a secret kept elsewhere instead of spelling one: template, shell
# and format references (${DB_PASSWORD}, {{ secrets.x }}, {params.key}, <your password>),
# code that reads a value (os.environ["X"], getpass()), and variable or attribute names
# (auth_token, self.secret_key: an underscore or a dot between word characters), and
# list literals.
_REFERENCE: Final = re.compile(
    r"\$[{(]|[{<\[]|%\(|[A-Za-z_][A-Za-z0-9_.]*[(\[]"
    r"|[A-Za-z_][A-Za-z0-9]*(?:[_.]+[A-Za-z0-9]+)+_*\Z"
)


# Identifiers that contain a key word but name something about the secret, not the
# secret itself (MAX_PASSWORD_LENGTH, PASSWORD_FILE, secret_references).
_ABOUT_THE_SECRET: Final = frozenset(
    """age arn at backend callback cb change changed check checker count created date dialog
    dir enabled endpoint entry env expires expiry factory field file form func handler
    header hint input kind label len length manager max mgr min mode name names param path
    pattern policy prompt provider ref reference references refs regex required reset
    rotation rule rules scope source storage store strength time timestamp ttl type
    updated url uri used validator var version widget""".split()  # noqa: SIM905
)
_REST_WORDS: Final = re.compile(r"[_.-]")


def _names_the_secret(match: re.Match[str]) -> bool:
    rest = match["rest"]
    return not rest or _REST_WORDS.split(rest)[-1] not in _ABOUT_THE_SECRET


_DIGIT: Final = re.compile("[0-9]")
_LETTER: Final = re.compile("[A-Za-z]")


def _looks_generated(value: str) -> bool:
    return _DIGIT.search(value) is not None and _LETTER.search(value) is not None


# Words that commonly follow "the password is" in prose rather than a password.
_PROSE_WORDS: Final = frozenset(
    """about above accepted after also always available bad before being blank both case
    changeable chosen common correct default different easy empty exactly expiring fine
    forgotten found from given good great hard here hidden important incorrect insecure
    insensitive invalid just kept known left long lost made false mandatory meant mine
    missing more much necessary needed never new none nothing null obvious okay old only
    optional ours over personal private public random read really required reset right
    same secret secure sensitive sent set shared short shown simple some still stolen
    strong such supposed taken temporary that their theirs then there these this those told
    too true unique unknown unset unsafe useless valid very visible weak what when where
    which with within without written wrong your yours""".split()  # noqa: SIM905
)
# Endings of English participles, adverbs and adjectives: "changed", "expiring", "rarely",
# "guessable", "obvious", "useful", "pointless".
_PROSE_ENDINGS: Final = ("ed", "ing", "ly", "able", "ible", "ous", "ful", "less")
_TRAILING_PUNCTUATION: Final = ".,;:!?)]}>"


def _names_password(value: str) -> bool:
    """Whether the word after "password is" reads as a password rather than as English.

    Anything quoted of four or more characters is a password; so is an unquoted word of
    four or more characters with a digit or a symbol in it or letter case changing inside
    it. A word of letters alone is a password too (people pick "swordfish"), unless it
    reads as English: a listed word, or one with a participle, adverb or adjective ending.
    """
    if value[0] in "\"'`":
        return len(value) - 2 >= 4
    word = value.rstrip(_TRAILING_PUNCTUATION)
    if len(word) < 4:
        return False
    if not word.replace("-", "").replace("'", "").isalpha():
        return True  # digits or symbols
    if word[1:] != word[1:].lower() and not word.isupper():
        return True  # mixed case such as "hunTer"
    lowered = word.lower()
    if lowered.endswith(_PROSE_ENDINGS):
        return False
    return all(part not in _PROSE_WORDS for part in lowered.split("-"))


def _looks_like_secret(value: str) -> bool:
    """Whether a word reads as a secret wherever it stands: six or more characters, not a
    phrase, letters mixed with digits or symbols or with letter case changing inside.

    This is the test after words that also have everyday senses ("my secret is
    patience", "the token is expired", "the password's length"), where a word of letters
    alone is prose.
    """
    word = value.strip("\"'`").rstrip(_TRAILING_PUNCTUATION)
    if len(word) < 6 or " " in word or _LETTER.search(word) is None:
        return False
    if not word.replace("-", "").replace("'", "").isalpha():
        return True
    return word[1:] != word[1:].lower() and not word.isupper()


# Words that, unquoted after a key inside a longer identifier, are code: types, keywords
# and common variable names (aws_secret_access_key=None, self._secret_key = value).
_CODE_WORDS: Final = frozenset(
    """any args bool bytes config data default dict false float int key kwargs lambda list
    nil none null object params passwd password result secret self settings str string
    text token true val value""".split()  # noqa: SIM905
)
_IDENTIFIER_CHARACTERS: Final = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-"
)


def _literal_assignment(match: re.Match[str], reading: str) -> bool:
    value = _value(match, reading)
    if not _names_the_secret(match) or _REFERENCE.match(value) or not value.strip("*"):
        return False
    if _PORT.match(value) and _in_url_host(match, reading):
        return False  # "http://a.pwd:1000/x": a host name and its port, not a key and value
    # A key word inside a longer identifier is mostly code, where an unquoted word that
    # is a type, a constant or a keyword is no secret. A bare key (password: ...) keeps
    # every value of four or more characters.
    start = match.start()
    embedded = match["rest"] or (start > 0 and reading[start - 1] in _IDENTIFIER_CHARACTERS)
    code_word = value.isalpha() and (value != value.lower() or value in _CODE_WORDS)
    return not (embedded and code_word and not match["quote"])


_URL_HOST: Final = re.compile(r"[a-z][a-z0-9+.-]*://[a-z0-9.-]*\Z", re.IGNORECASE)
_PORT: Final = re.compile(r"[0-9]{1,5}(?:[/?#]|\Z)")


def _in_url_host(match: re.Match[str], reading: str) -> bool:
    """Whether the key word ends a URL's host name: what follows it is then the port."""
    start = match.start()
    return _URL_HOST.search(reading, max(0, start - 256), start) is not None


def _generated_assignment(match: re.Match[str], reading: str) -> bool:
    value = _value(match, reading)
    return _names_the_secret(match) and _REFERENCE.match(value) is None and _looks_generated(value)


def _generated_value(match: re.Match[str], reading: str) -> bool:
    return _looks_generated(_value(match, reading))


def _password_prose(match: re.Match[str], reading: str) -> bool:
    value = _value(match, reading)
    return _REFERENCE.match(value) is None and _names_password(value)


def _secret_prose(match: re.Match[str], reading: str) -> bool:
    value = _value(match, reading)
    return _REFERENCE.match(value) is None and _looks_like_secret(value)


# Sentences about a secret: the noun, an optional phrase naming what it is for, a verb
# (or, after that phrase, a colon), and the value: "my password is hunter2", "the
# password for the router was 'swordfish'", "password for the router: Xk9!mq2z", "my
# password's hunter2x", "my api key is abcd1234efgh5678".
_PASSWORD_NOUN: Final = r"p(?:ass(?:word|wd|phrase|code)|wd|w(?<![a-z]pw))"  # noqa: S105
# One pattern per noun, so that each starts with its literal word.
_SECRET_NOUNS: Final = (
    "secret(?<![a-z]secret)",
    "token(?<![a-z]token)",
    *(
        f"{word}(?<![a-z]{word})[ _-]?(?:key|token)"
        for word in ("api", "access", "auth", "bearer", "session", "refresh")
    ),
)
_PROSE_PHRASE: Final = r"[ \t]{1,4}(?:for|to|of|on|at)(?:[ \t]{1,4}[^\s]{1,32}){1,3}"
_PROSE_VERB: Final = (
    rf"s?(?:(?:{_PROSE_PHRASE})?[ \t]{{1,4}}(?:is|was|are|were|will[ \t]{{1,4}}be)(?![a-z])"
    rf"[ \t]{{0,4}}[:=]?|{_PROSE_PHRASE}[ \t]{{0,4}}:)"
)
_PROSE_VALUE: Final = (
    r"[ \t]{0,4}(?:(?:now|still|just|simply)[ \t]{1,4})?"
    r"(?P<value>[\"'`][^\"'`\n]{1,128}[\"'`]|[^\s\"'`]{1,128})"
)
# "password's" is also a possessive ("the password's length is ..."): after it, and after
# any other secret noun, only a value that looks like a secret is one.
_PROSE_SHAPES: Final = (
    _shape(_PASSWORD_NOUN + _PROSE_VERB + _PROSE_VALUE, lowered=True, accepts=_password_prose),
    _shape(_PASSWORD_NOUN + "'s" + _PROSE_VALUE, lowered=True, accepts=_secret_prose),
    *(
        _shape(noun + f"(?:{_PROSE_VERB}|'s)" + _PROSE_VALUE, lowered=True, accepts=_secret_prose)
        for noun in _SECRET_NOUNS
    ),
)

_CREDENTIAL_SHAPES: Final = (
    *(_shape(pattern) for pattern in _VENDOR_TOKENS),
    _shape(
        r"authorization[ \t]{0,4}[:=][ \t]{0,4}[\"']?(?:basic|bearer|token|digest)[ \t]{1,4}"
        r"[a-z0-9._~+/-]{8,}",
        lowered=True,
    ),
    *(
        _shape(
            f"{key}{_KEY_REST}{_ASSIGN}(?P<value>{_VALUE}{{4,256}})",
            lowered=True,
            accepts=_literal_assignment,
        )
        for key in _STRONG_KEYS
    ),
    *(
        _shape(
            f"{key}{_KEY_REST}{_ASSIGN}(?P<value>{_GENERATED}{{16,256}})",
            lowered=True,
            accepts=_generated_assignment,
        )
        for key in _WEAK_KEYS
    ),
    _shape(
        r"bearer(?<![a-z]bearer)[ \t]{1,4}(?P<value>[a-z0-9._~+/-]{16,256})",
        lowered=True,
        accepts=_generated_value,
    ),
    *_PROSE_SHAPES,
)

# --- compact JOSE tokens ------------------------------------------------------------------

# "eyJ" is base64url for '{"'. The lookbehind makes only the first "eyJ" of a base64url
# run a candidate, so a run of repeated "eyJ" is scanned once, not once per repeat.
_COMPACT_TOKEN_SHAPES: Final = (
    _shape(r"eyJ(?<![A-Za-z0-9_-]eyJ)[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*"),
)

# --- social-security numbers --------------------------------------------------------------


def _issued_ssn(match: re.Match[str], reading: str) -> bool:
    """Whether the number can have been issued: area not 000, 666 or 9xx, group not 00,
    serial not 0000. The match starts at the separator after the area."""
    start = match.start()
    area, group, serial = reading[start - 3 : start], match["group"], match["serial"]
    return area not in ("000", "666") and area[0] != "9" and group != "00" and serial != "0000"


# The digit shapes start at their first separator (a literal or a small class), not at a
# digit, so a long run of digits is skipped at substring-search speed.
_SSN_SHAPES: Final = (
    # 3-2-4 with hyphens, not inside a longer hyphenated number.
    _shape(r"-(?<=[0-9]{3}-)(?<![0-9-][0-9]{3}-)[0-9]{2}-[0-9]{4}(?![0-9-])"),
    # 3-2-4 with single spaces or dots, when the number could have been issued.
    _shape(
        r"(?P<sep>[ .])(?<=[0-9]{3}[ .])(?<![0-9]{4}[ .])(?<![0-9][ .][0-9]{3}[ .])"
        r"(?P<value>(?P<group>[0-9]{2})(?P=sep)(?P<serial>[0-9]{4}))(?![0-9])(?![ .][0-9])",
        accepts=_issued_ssn,
    ),
    # Any 3-2-4 grouping, undashed included, a few characters after an SSN label.
    _shape(
        r"s(?<![a-z]s)(?:sns?|s\#|ocial[ -]?security|oc\.?[ -]?sec\.?)(?![a-z])"
        r"(?=(?P<gap>[^0-9\n]{0,24}))(?P=gap)[0-9]{3}[ .-]?[0-9]{2}[ .-]?[0-9]{4}(?![0-9])",
        lowered=True,
    ),
)


def _has_shape(shapes: tuple[_Shape, ...], plain: str, lowered: str) -> bool:
    for shape in shapes:
        text = lowered if shape.lowered else plain
        accepts = shape.accepts
        if accepts is None:
            if shape.pattern.search(text):
                return True
            continue
        # After a match whose value is rejected the search resumes where that value
        # started, so a key hidden in a rejected value is still seen; every value starts
        # after its key word, so the search always moves on.
        position = 0
        while (match := shape.pattern.search(text, position)) is not None:
            if accepts(match, plain):
                return True
            position = match.start("value")
    return False


# --- payment cards ------------------------------------------------------------------------

_CARD_MIN, _CARD_MAX = 13, 19
_SEPARATORS: Final = " \t\r\n./\\_-"
_DIGITS: Final = "0123456789"
_ASCII_LETTERS: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
_SEPARATOR_CLASS: Final = "[ \\t\\r\\n./\\\\_-]"
# Spans of digits, separators and marks (hidden characters) that start and end with a
# digit: one repetition over one class, so every span is consumed once.
_DIGIT_SPAN: Final = re.compile(f"[0-9](?:[0-9{_MARK}{_SEPARATOR_CLASS[1:-1]}]*[0-9])?")
# Groups are joined by one to three separator characters; a longer gap splits a span.
_LONG_GAP: Final = re.compile(_SEPARATOR_CLASS + "{4,}")
_GROUP: Final = re.compile(r"[0-9]+")
_SEPARATOR: Final = re.compile(_SEPARATOR_CLASS + "+")
_BLANKS: Final = str.maketrans("", "", " \t\r\n")
_DOUBLED: Final = str.maketrans("0123456789", "0246813579")  # 2*d with its digits summed
_PLAIN_VALUES: Final = bytes.maketrans(b"0123456789", bytes(range(10)))
_DOUBLED_VALUES: Final = bytes.maketrans(b"0123456789", bytes((0, 2, 4, 6, 8, 1, 3, 5, 7, 9)))
_SEPARATORS_TO_BLANK: Final = str.maketrans(dict.fromkeys(_SEPARATORS, " "))


def _luhn(digits: str) -> bool:
    plain = sum(map(int, digits[-1::-2]))
    doubled = sum(map(int, digits[-2::-2].translate(_DOUBLED)))
    return (plain + doubled) % 10 == 0


def _luhn_weights(digits: str) -> tuple[bytes, bytes]:
    """Each digit's share of the Luhn sum of a slice, for slices whose last digit has an
    even index (first) or an odd one (second).

    The check digit is a slice's last digit, so a digit is doubled when its distance from
    the slice's end is odd: only the parity of the slice's end matters, and the Luhn sum
    of any slice is the plain sum of one of these two byte strings over it.
    """
    raw = digits.encode("ascii")
    plain, doubled = raw.translate(_PLAIN_VALUES), raw.translate(_DOUBLED_VALUES)
    ends_even, ends_odd = bytearray(plain), bytearray(doubled)
    ends_even[1::2] = doubled[1::2]
    ends_odd[1::2] = plain[1::2]
    return bytes(ends_even), bytes(ends_odd)


def _separator_kinds(separators: list[str]) -> list[str]:
    """Blanks around a dash or a dot do not change the separator: "4111 - 1111" is "-"."""
    stripped = "\x01".join(separators).translate(_BLANKS).split("\x01")
    return [kind or " " for kind in stripped]


# A run's layout has one character per digit group, its length (x beyond nine).
_LENGTH_CODES: Final = {length: str(length) for length in range(1, 10)}
_AMEX_LAYOUT: Final = re.compile("(?=46[45])")  # 4-6-5 and 4-6-4, overlaps included
_FOURS: Final = re.compile("4{3,}")
# Groups of four that are years 1900-2099 are marked "y" in a copy of the layout.
_YEAR_MARKS: Final = {str(year): "y" for year in range(1900, 2100)}


def _holds_unbroken_card(groups: list[str], separators: list[str]) -> bool:
    """Whether one group of a run is a card written without separators.

    A group next to a lone dot is a decimal fraction or part of a version, not a card.
    """
    for index, group in enumerate(groups):
        if not _CARD_MIN <= len(group) <= _CARD_MAX:
            continue
        after_dot = index > 0 and separators[index - 1] == "."
        before_dot = index < len(separators) and separators[index] == "."
        if not (after_dot or before_dot) and _luhn(group):
            return True
    return False


def _run_holds_card(run: str) -> bool:
    """Whether consecutive digit groups of one run form a card in a printed layout."""
    groups = run.translate(_SEPARATORS_TO_BLANK).split()
    lengths = list(map(len, groups))
    total = sum(lengths)
    if len(groups) == 1:
        return _CARD_MIN <= total <= _CARD_MAX and _luhn(groups[0])
    width = lengths[0]
    if (
        _CARD_MIN <= total <= _CARD_MAX
        and width <= 3
        and all(length == width for length in lengths[:-1])
        and lengths[-1] <= width
        and len(set(_separator_kinds(_SEPARATOR.findall(run)))) == 1
        and _luhn("".join(groups))
    ):
        return True  # equal groups of one, two or three digits over the whole run
    layout = "".join(map(_LENGTH_CODES.get, lengths, repeat("x")))
    if "x" in layout and _holds_unbroken_card(groups, _SEPARATOR.findall(run)):
        return True
    # Groups of four with a shorter or equal last group (13-16 digits), four fours and a
    # shorter group (17-19 digits), 4-6-5 and 4-6-4, anywhere in the run.
    if "444" not in layout and "46" not in layout:
        return False
    # The layout again, with fours that are years marked "y": a window of fours with no
    # "4" left in it is a list of years, not a card.
    years = "".join(map(_YEAR_MARKS.get, groups, layout))
    offsets = list(accumulate(lengths, initial=0))
    weights = _luhn_weights("".join(groups))

    def is_card(start: int, end: int) -> bool:
        first, last = offsets[start], offsets[end]
        if sum(weights[(last - 1) % 2][first:last]) % 10:
            return False
        marks = years[start:end]
        return "4" in marks or "6" in marks

    if any(is_card(match.start(), match.start() + 3) for match in _AMEX_LAYOUT.finditer(layout)):
        return True
    for match in _FOURS.finditer(layout):
        start, end = match.span()
        if "4" not in years[start:end]:
            continue  # a list of years, however it is cut
        # Windows of four fours start four digits apart, so they all end on the same
        # parity: one weight string and one running sum serve the whole stretch, and
        # window k sums the sixteen weights from digit 4k on.
        base = offsets[start]
        running = list(accumulate(weights[(base + 15) % 2][base : offsets[end]], initial=0))
        window_sums = map(operator.sub, running[16::4], running[::4])
        for index, total in enumerate(window_sums, start):
            if total % 10 == 0 and "4" in years[index : index + 4]:
                return True
        shorter_last = end < len(layout) and layout[end] in "123"
        if shorter_last and (
            is_card(end - 3, end + 1) or (end - start >= 4 and is_card(end - 4, end + 1))
        ):
            return True
    return False


def _has_payment_card(marked: str) -> bool:
    for match in _DIGIT_SPAN.finditer(marked):
        start, end = match.span()
        if end - start < _CARD_MIN:
            continue
        visible = match.group().replace(_MARK, "")
        # A digit group glued to a letter is part of a word, a hash or an identifier
        # (hex digests hold long digit runs), not of a card.
        if start > 0 and marked[start - 1] in _ASCII_LETTERS:
            visible = visible.lstrip(_DIGITS).lstrip(_SEPARATORS)
        if end < len(marked) and marked[end] in _ASCII_LETTERS:
            visible = visible.rstrip(_DIGITS).rstrip(_SEPARATORS)
        for run in _LONG_GAP.split(visible):
            if len(run) >= _CARD_MIN and _run_holds_card(run):
                return True
        # A hidden character may stand where a separator was: a span with hidden
        # characters in it is also judged by its digits alone.
        if _MARK in match.group():
            digits = "".join(_GROUP.findall(visible))
            if _CARD_MIN <= len(digits) <= _CARD_MAX and _luhn(digits):
                return True
    return False


# --- the policy ---------------------------------------------------------------------------

_FAMILIES: Final = (
    (PolicyReason.PRIVATE_KEY_SHAPE, _PRIVATE_KEY_SHAPES),
    (PolicyReason.CREDENTIAL_SHAPE, _CREDENTIAL_SHAPES),
    (PolicyReason.COMPACT_TOKEN_SHAPE, _COMPACT_TOKEN_SHAPES),
    (PolicyReason.GOVERNMENT_IDENTIFIER_SHAPE, _SSN_SHAPES),
)


# The families for a reading with its blanks read as nothing, where words may be glued
# together ("required\u2003and" becomes "requiredand"): sentences are left to the reading
# with the blanks as spaces.
_GLUED_FAMILIES: Final = tuple(
    (reason, tuple(shape for shape in shapes if shape not in _PROSE_SHAPES))
    for reason, shapes in _FAMILIES
)
_ASCII_LOWER: Final = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _lower(text: str) -> str:
    """Lower-cased with the same offsets (a few non-ASCII letters change length)."""
    lowered = text.lower()
    return lowered if len(lowered) == len(text) else text.translate(_ASCII_LOWER)


def find_disallowed(text: str) -> PolicyReason | None:
    """The first detector family that recognises ``text``, or None when it may be stored."""
    marked = _readings(text)
    views = [_visible(reading) for reading in marked]
    spaced = [(seen, _lower(seen)) for seen, _ in views]
    glued = [(seen, _lower(seen)) for _, seen in views if seen is not None]
    for (reason, shapes), (_, glued_shapes) in zip(_FAMILIES, _GLUED_FAMILIES, strict=True):
        if any(_has_shape(shapes, seen, lowered) for seen, lowered in spaced) or any(
            _has_shape(glued_shapes, seen, lowered) for seen, lowered in glued
        ):
            return reason
    if any(_has_payment_card(reading.replace(_BLANK, " ")) for reading in marked):
        return PolicyReason.PAYMENT_CARD_SHAPE
    return None


def enforce_content_policy(fields: Iterable[tuple[str, str | None]]) -> None:
    """Check ``(public field name, value)`` pairs in order; refuse on the first match.

    Raises ``disallowed_content`` carrying only the field name and the reason word.
    """
    for field, value in fields:
        if value is None:
            continue
        reason = find_disallowed(value)
        if reason is not None:
            raise MemoryOperationError(
                ErrorCode.DISALLOWED_CONTENT, field=field, reason=reason.value
            )
