"""Value grammars: ids, namespace/collection identifiers, language, text, tags, timestamps."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TypeGuard

__all__ = [
    "CONTENT_MAX",
    "LABEL_MAX",
    "TAGS_MAX",
    "TAG_MAX",
    "TITLE_MAX",
    "UNDETERMINED_LANGUAGE",
    "format_timestamp",
    "is_identifier",
    "is_legacy_id",
    "is_memory_id",
    "is_timestamp",
    "normalize_bounded_text",
    "normalize_language",
    "normalize_tag",
    "normalize_tags",
    "normalize_text",
    "tag_key",
    "utc_now_seconds",
]

CONTENT_MAX = 4000
TITLE_MAX = 200
LABEL_MAX = 100
TAG_MAX = 50
TAGS_MAX = 10
LANGUAGE_MAX = 35
UNDETERMINED_LANGUAGE = "und"

# \Z rather than $ so that a trailing newline can never slip through a fullmatch-like check.
_MEMORY_ID = re.compile(r"mem_[0-9a-f]{32}\Z")
_LEGACY_ID = re.compile(r"[A-Za-z0-9._-]{1,100}\Z")
_IDENTIFIER = re.compile(r"[a-z0-9](?:[a-z0-9_-]{0,62}[a-z0-9])?\Z")
_LANGUAGE = re.compile(r"[a-z]{2,8}(?:-[a-z0-9]{1,8})*\Z")
_TIMESTAMP = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z\Z")


def _is_str(value: object) -> TypeGuard[str]:
    # bool/int subclasses never reach here, but str subclasses could smuggle behaviour.
    return type(value) is str


def is_memory_id(value: object) -> bool:
    """A canonical id: ``mem_`` and 32 lowercase hex digits."""
    return _is_str(value) and _MEMORY_ID.match(value) is not None


def is_legacy_id(value: object) -> bool:
    """A version-1 id: 1-100 characters of ASCII letters, digits, dot, underscore, hyphen."""
    return _is_str(value) and _LEGACY_ID.match(value) is not None


def is_identifier(value: object) -> bool:
    """A namespace or collection id: 1-64 of a-z/0-9, with - or _ only inside."""
    return _is_str(value) and _IDENTIFIER.match(value) is not None


def normalize_language(value: object) -> str | None:
    """Trim and lowercase a language tag; null means undetermined. None when invalid."""
    if value is None:
        return UNDETERMINED_LANGUAGE
    if not _is_str(value):
        return None
    tag = value.strip().lower()
    # ASCII check first: str.lower() of some non-ASCII letters yields ASCII ones.
    if len(tag) > LANGUAGE_MAX or not tag.isascii() or _LANGUAGE.match(tag) is None:
        return None
    return tag


def _has_surrogates(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def normalize_text(value: str) -> str:
    """Unify line endings to LF, compose to NFC, then strip surrounding whitespace."""
    unified = value.replace("\r\n", "\n").replace("\r", "\n")
    return unicodedata.normalize("NFC", unified).strip()


def normalize_bounded_text(value: object, maximum: int) -> str | None:
    """Normalised text of 1..maximum characters, or None when missing, blank or too long."""
    if not _is_str(value) or _has_surrogates(value):
        return None
    text = normalize_text(value)
    if not 1 <= len(text) <= maximum:
        return None
    return text


def normalize_tag(value: object) -> str | None:
    """Collapse internal whitespace of one tag; None unless the result has 1-50 characters."""
    if not _is_str(value) or _has_surrogates(value):
        return None
    tag = " ".join(unicodedata.normalize("NFC", value).split())
    if not 1 <= len(tag) <= TAG_MAX:
        return None
    return tag


def tag_key(tag: str) -> str:
    """The comparison form of a normalised tag: whitespace collapsed and casefolded."""
    return " ".join(tag.split()).casefold()


def normalize_tags(values: object, *, minimum: int) -> tuple[str, ...] | None:
    """Normalise a tag list of minimum..10 items that are unique ignoring case; else None."""
    if not isinstance(values, list | tuple) or type(values) not in (list, tuple):
        return None
    items: Sequence[object] = values
    if not minimum <= len(items) <= TAGS_MAX:
        return None
    tags: list[str] = []
    seen: set[str] = set()
    for item in items:
        tag = normalize_tag(item)
        if tag is None or tag_key(tag) in seen:
            return None
        seen.add(tag_key(tag))
        tags.append(tag)
    return tuple(tags)


def is_timestamp(value: object) -> bool:
    """Strict ``YYYY-MM-DDTHH:MM:SSZ`` naming a real UTC instant (no leap seconds)."""
    if not _is_str(value) or _TIMESTAMP.match(value) is None:
        return False
    try:
        # The pattern fixed every field's width; the constructor rejects what strptime
        # would (month 13, February 30, hour 24, second 60, year 0), at a fraction of
        # its cost.
        datetime(
            int(value[0:4]),
            int(value[5:7]),
            int(value[8:10]),
            int(value[11:13]),
            int(value[14:16]),
            int(value[17:19]),
        )
    except ValueError:
        return False
    return True


def format_timestamp(moment: datetime) -> str:
    """Render an aware datetime in the strict UTC-second form, dropping sub-second parts."""
    if moment.tzinfo is None:
        raise ValueError("timestamp must be timezone-aware")
    utc = moment.astimezone(UTC)
    # Formatted by hand: strftime("%Y") does not zero-pad years before 1000 on glibc.
    return (
        f"{utc.year:04d}-{utc.month:02d}-{utc.day:02d}"
        f"T{utc.hour:02d}:{utc.minute:02d}:{utc.second:02d}Z"
    )


def utc_now_seconds() -> str:
    """The current UTC time truncated to whole seconds, in the strict form."""
    return format_timestamp(datetime.now(UTC).replace(microsecond=0))
