"""The bounded content policy shared by remember and revise.

Signature detection, not data-loss prevention: five families recognise the *shapes* of
private keys, credentials, compact JOSE tokens, US social-security numbers and payment
cards. Every checked field is tested against every family in a fixed order and only the
first match is reported, as a public field name plus one reason word. The matched value,
its offset and the detector that fired never leave this module.

What the detectors see
    Matching runs on a *reading* of the text; the stored text is never changed. The
    reading is the text as a person sees it: NFKC (fullwidth, mathematical, circled and
    superscript forms become plain ones), accented letters read as their base letter,
    format characters (zero-width space and joiners, soft hyphen, BOM, bidi controls, tag
    characters), combining marks, variation selectors, Hangul fillers and control
    characters dropped, and lookalike letters of other scripts (Cyrillic, Greek, Armenian,
    Cherokee, Lisu, a few Latin ones), other scripts' decimal digits, dashes, spaces and a
    few punctuation lookalikes folded to ASCII. Text smuggled entirely in Unicode tag
    characters is decoded and checked as well. A secret split by invisible characters or
    spelled with lookalikes is therefore refused exactly like the plain one: nothing an
    invisible character hides can be stored.

What is caught
    * private keys: PEM and PGP "BEGIN ... PRIVATE KEY" armour in any letter case and with
      any key-type words, PuTTY key-file headers, OpenSSH key bodies (their base64 magic)
      and age secret keys;
    * credentials: AWS access-key ids; GitHub classic and fine-grained, GitLab, npm, Slack
      (tokens and webhooks), Stripe, Google (API keys, OAuth client secrets and access
      tokens), Azure AD client secrets and SAS signatures, Twilio, SendGrid, OpenAI,
      Anthropic, Hugging Face, PyPI, Docker Hub, DigitalOcean, Shopify and Databricks
      tokens; MyMCP's own operator tokens; ``Authorization: Basic`` / ``Bearer`` header
      text and long bearer values; URLs with ``user:password@``; key=value and key: value
      pairs (any letter case, the key anywhere in an identifier such as DB_PASSWORD,
      aws_secret_access_key or clientSecret) whose key names a password, passphrase,
      secret, API key, access/refresh/auth/session token or Azure account/shared access
      key and whose value has four or more characters, unless the value plainly refers to
      a secret kept elsewhere (``${VAR}``, ``{{ template }}``, ``<placeholder>``, a call or
      subscript such as ``os.environ["X"]``, a variable or attribute name such as
      ``auth_token`` or ``self.secret``, a ``****`` mask), the identifier names something
      about the secret (MAX_PASSWORD_LENGTH, PASSWORD_FILE), or the key sits inside a
      longer identifier and the unquoted value is a type, keyword or common variable name
      (``aws_secret_access_key=None``); keys naming any other token, a signature or
      ``something_key`` when the value has sixteen or more characters mixing letters and
      digits; and prose such as "my password is hunter2". The code and prose rules are
      heuristics: a bare key (``password: ...``) refuses any other value of four or more
      characters, and a single word after "password is" that reads as English (a short
      word, a participle, an adverb or a listed adjective) is prose.
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
    text (a legacy ``sk-`` key or a card number directly after a letter).

Ordinary text stays storable: versions, dates, times, IP addresses, hostnames, module
paths, phone numbers, ISBNs and other numbers that fail Luhn or the card layouts, hex
digests, URLs without userinfo, code that reads secrets from elsewhere, and prose about
passwords or tokens.

Cost
    Every pattern starts with a literal (or a one-character class) and uses only bounded
    repetitions, repetitions over classes disjoint from what follows them, or a part
    captured once by a lookahead, so a failed attempt costs bounded work and each field
    is checked in time linear in its length. Card windows are Luhn-checked as one slice
    sum over precomputed per-digit weights. ``bench/content_policy.py`` measures the worst
    cases.
"""

from __future__ import annotations

import functools
import operator
import re
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
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

# Lookalikes of the ASCII letters token alphabets use, by script. Each string pairs with
# the ASCII string below it, character by character.
_LOOKALIKES: Final = (
    # Cyrillic
    ("АВСЕНІЈКМОРЅТХУҮӀԚԜЗ", "ABCEHIJKMOPSTXYYlQW3"),
    ("аеорсухѕіјһԁԛԝӏүкмтнвгпь", "aeopcyxsijhdqwlykmtHBrnb"),
    # Greek
    ("ΑΒΕΖΗΙΚΜΝΟΡΤΥΧϹͿϜ", "ABEZHIKMNOPTYXCJF"),  # noqa: RUF001
    ("αονιρυχγκτϲϳε", "aovipuxyktcje"),
    # Armenian
    ("ՕօսցհոզՍՏԼ", "OoughnqUSL"),
    # Cherokee capitals
    ("ᎪᏴᏟᎬᏀᎻᎫᏦᏞᎷᏢᏚᎢᏙᏔᏉᏃᎠᎡᏒ", "ABCEGHJKLMPSTVWVZDRR"),
    # Lisu
    ("ꓐꓑꓒꓓꓔꓖꓗꓙꓚꓜꓝꓟꓠꓡꓢꓣꓦꓧꓪꓫꓬꓮꓰꓲꓳꓴ", "BPdDTGKJCZFMNLSRVHWXYAEIOU"),  # noqa: RUF001
    # Latin letters that read as other ASCII letters
    ("ıȷɑɡɩǀʟꜱꞮ", "ijagilLsI"),
)

# Punctuation lookalikes that matter to the shapes: dots, slashes, colons, equals, minus.
_PUNCTUATION: Final = {
    "\u00b7": ".",  # middle dot
    "\u2027": ".",  # hyphenation point
    "\u30fb": ".",  # katakana middle dot
    "\u2044": "/",  # fraction slash
    "\u2215": "/",  # division slash
    "\u29f8": "/",  # big solidus
    "\u02d0": ":",  # modifier letter triangular colon
    "\u2236": ":",  # ratio
    "\ua789": ":",  # modifier letter colon
    "\ua78a": "=",  # modifier letter short equals
    "\u2212": "-",  # minus sign
    "\u2043": "-",  # hyphen bullet
    "\u02d7": "-",  # modifier letter minus
    "\u2800": " ",  # braille blank
}

# Letters that render as nothing although Unicode files them as letters (Hangul fillers).
_INVISIBLE_LETTERS: Final = "\u115f\u1160\u3164\uffa0"
# ASCII control characters other than tab and line ends are dropped as well.
_DROPPED_CATEGORIES: Final = frozenset({"Cc", "Cf", "Mn", "Me"})
# Tag characters spell ASCII invisibly: U+E0020..U+E007E mirror U+0020..U+007E.
_TAG_OFFSET: Final = 0xE0000
_TAG_RUN: Final = re.compile("[\U000e0020-\U000e007e]+")
# Everything above the two first planes is dropped wholesale in the special-purpose
# plane (tags, variation selectors) and left alone elsewhere (CJK and unassigned).
_SCANNED_PLANES: Final = range(0x80, 0x20000)
_SPECIAL_PURPOSE_PLANE: Final = range(0xE0000, 0xE1000)


# Dropped characters leave this mark in the reading the card detector sees (a digit run
# with hidden characters in it is judged by its digits alone); every other detector sees
# the reading with the marks removed. NUL itself is a dropped control character.
_MARK: Final = "\x00"


@dataclass(frozen=True, slots=True)
class _Folding:
    """How the reading is made from NFKC text, built once from Unicode's tables."""

    table: dict[int, int | str]  # every character the reading changes or drops
    applies: re.Pattern[str]  # any character of ``table``, and every astral character


def _fold_letters(text: str, lookalikes: dict[int, int]) -> str:
    """``text`` decomposed, without its marks, lookalikes folded (used to build tables)."""
    decomposed = unicodedata.normalize("NFKD", text)
    bare = "".join(c for c in decomposed if unicodedata.category(c) not in _DROPPED_CATEGORIES)
    return bare.translate(lookalikes)


@functools.cache
def _folding() -> _Folding:
    """Built on first use (about 0.1 s) from the running interpreter's Unicode tables."""
    mark = ord(_MARK)
    lookalikes = {
        ord(lookalike): ord(letter)
        for lookalike_letters, ascii_letters in _LOOKALIKES
        for lookalike, letter in zip(lookalike_letters, ascii_letters, strict=True)
    }
    table: dict[int, int | str] = {code: mark for code in _SPECIAL_PURPOSE_PLANE}
    table.update((ord(char), mark) for char in _INVISIBLE_LETTERS)
    table.update((code, mark) for code in _ASCII_CONTROL_CODES)
    for code in _SCANNED_PLANES:
        char = chr(code)
        category = unicodedata.category(char)
        if category in _DROPPED_CATEGORIES:
            table[code] = mark
        elif category == "Nd":
            table[code] = 0x30 + unicodedata.decimal(char)
        elif category == "Pd":
            table[code] = ord("-")
        elif category == "Zs":
            table[code] = ord(" ")
        elif category in ("Zl", "Zp"):
            table[code] = ord("\n")
        elif unicodedata.decomposition(char):
            # Accented letters NFKC keeps composed (é, Ấ, ё) read as their base letter.
            base = _fold_letters(char, lookalikes)
            if base.isascii() and base:
                table[code] = base
    table.update(lookalikes)
    table.update((ord(lookalike), ord(plain)) for lookalike, plain in _PUNCTUATION.items())
    # A class over the basic plane compiles to a bitmap; astral ranges in it would make
    # every test a linear search, so any astral character sends the text through the table.
    basic = "".join(re.escape(chr(code)) for code in sorted(table) if code <= 0xFFFF)
    return _Folding(table=table, applies=re.compile(f"[{basic}]|[\U00010000-\U0010ffff]"))


_ASCII_CONTROL_CODES: Final = (*range(0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F)
_ASCII_CONTROL_TO_MARK: Final = dict.fromkeys(_ASCII_CONTROL_CODES, ord(_MARK))
_TAG_TO_ASCII: Final = {code: code - _TAG_OFFSET for code in range(0xE0020, 0xE007F)}


def _readings(text: str) -> tuple[str, ...]:
    """The text as read (see the module docstring), plus any tag-character payload.

    Characters the reading drops are left as ``_MARK``.
    """
    if text.isascii():
        return (text.translate(_ASCII_CONTROL_TO_MARK),)
    folding = _folding()
    hidden = "".join(_TAG_RUN.findall(text))
    if hidden:  # decoded, the payload is printable ASCII and needs no folding
        return (_read(text, folding), hidden.translate(_TAG_TO_ASCII))
    return (_read(text, folding),)


def _read(text: str, folding: _Folding) -> str:
    composed = unicodedata.normalize("NFKC", text)
    if folding.applies.search(composed):
        return composed.translate(folding.table)
    return composed


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
    # URLs carrying user:password userinfo. Neither part may hold a slash, so the scan
    # from one "://" ends before the next one.
    r"://(?<=[A-Za-z0-9]://)[^\s/@:?#]{1,256}:[^\s/@?#]{1,256}@",
)

# Key names (matched lower-cased, anywhere in an identifier: DB_PASSWORD, clientSecret),
# the rest of the identifier only after a separator (so "secretary" is no key), then an
# assignment and the value.
_JOIN: Final = r"[ _.-]?"
# The lookahead captures the rest greedily and the back-reference consumes it, so it is
# never backtracked into (what follows it cannot start with one of its characters
# anyway); dense key words would otherwise each cost forty failed attempts.
_KEY_REST: Final = r"(?=(?P<rest>(?:[_.-][a-z0-9_.-]{0,40})?))(?P=rest)"
_ASSIGN: Final = r"[\"']?[ \t]{0,4}(?::=|=>|[:=])[ \t]{0,4}(?P<quote>[\"'`]?)"
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
    """about above after also always available before being blank both case changeable
    chosen different easy empty exactly expiring fine forgotten found from given good hard
    here hidden incorrect insecure insensitive invalid just kept known left long lost made
    false mandatory meant missing more much needed never none nothing null okay only optional
    over public random read really required reset right same secret secure sensitive sent
    shared short shown simple some still stolen strong such supposed taken that their then
    there these this those told true unique unknown unset unsafe useless valid very visible weak
    what when where which with within without written wrong your yours""".split()  # noqa: SIM905
)
_TRAILING_PUNCTUATION: Final = ".,;:!?)]}>"


def _names_password(value: str) -> bool:
    """Whether the word after "password is" reads as a password rather than as English."""
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
    if lowered.endswith(("ed", "ing", "ly")):
        return False
    return all(part not in _PROSE_WORDS for part in lowered.split("-"))


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
    # A key word inside a longer identifier is mostly code, where an unquoted word that
    # is a type, a constant or a keyword is no secret. A bare key (password: ...) keeps
    # every value of four or more characters.
    start = match.start()
    embedded = match["rest"] or (start > 0 and reading[start - 1] in _IDENTIFIER_CHARACTERS)
    code_word = value.isalpha() and (value != value.lower() or value in _CODE_WORDS)
    return not (embedded and code_word and not match["quote"])


def _generated_assignment(match: re.Match[str], reading: str) -> bool:
    value = _value(match, reading)
    return _names_the_secret(match) and _REFERENCE.match(value) is None and _looks_generated(value)


def _generated_value(match: re.Match[str], reading: str) -> bool:
    return _looks_generated(_value(match, reading))


def _password_prose(match: re.Match[str], reading: str) -> bool:
    value = _value(match, reading)
    return _REFERENCE.match(value) is None and _names_password(value)


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
    # "my password is hunter2", "the password for the router was 'swordfish'".
    _shape(
        r"p(?:ass(?:word|wd|phrase|code)|wd)s?"
        r"(?:[ \t]{1,4}(?:for|to|of|on|at)(?:[ \t]{1,4}[^\s]{1,32}){1,3})?"
        r"[ \t]{1,4}(?:is|was|are|were|will[ \t]{1,4}be)(?![a-z])[ \t]{0,4}[:=]?[ \t]{0,4}"
        r"(?:(?:now|still|just|simply)[ \t]{1,4})?"
        r"(?P<value>[\"'`][^\"'`\n]{1,128}[\"'`]|[^\s\"'`]{1,128})",
        lowered=True,
        accepts=_password_prose,
    ),
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
_ASCII_LOWER: Final = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _lower(text: str) -> str:
    """Lower-cased with the same offsets (a few non-ASCII letters change length)."""
    lowered = text.lower()
    return lowered if len(lowered) == len(text) else text.translate(_ASCII_LOWER)


def find_disallowed(text: str) -> PolicyReason | None:
    """The first detector family that recognises ``text``, or None when it may be stored."""
    marked = _readings(text)
    plain = [reading.replace(_MARK, "") for reading in marked]
    pairs = [(reading, _lower(reading)) for reading in plain]
    for reason, shapes in _FAMILIES:
        if any(_has_shape(shapes, reading, lowered) for reading, lowered in pairs):
            return reason
    if any(_has_payment_card(reading) for reading in marked):
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
