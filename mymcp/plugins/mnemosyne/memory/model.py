"""The memory domain's values: scopes and kinds, value grammars, records, references,
record locations and the stable error codes.

Everything here is immutable and free of I/O; every other module builds on it.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Final, TypeGuard

# -- errors: stable codes, their statuses and fixed messages -------------------------------


class ErrorStatus(StrEnum):
    """The ``status`` member of a failed tool result."""

    INVALID_REQUEST = "invalid_request"
    POLICY_ERROR = "policy_error"
    REFUSED = "refused"
    NOT_FOUND = "not_found"
    CONFLICT = "conflict"
    UNCERTAIN = "uncertain"
    STORAGE_ERROR = "storage_error"
    RETRIEVAL_ERROR = "retrieval_error"
    INTERNAL_ERROR = "internal_error"


class ErrorCode(StrEnum):
    """Every stable error code; its status and message come from the tables below."""

    INVALID_QUERY = "invalid_query"
    INVALID_SCOPE = "invalid_scope"
    INVALID_NAMESPACE = "invalid_namespace"
    INVALID_TAGS = "invalid_tags"
    INVALID_REQUEST = "invalid_request"
    INVALID_COLLECTION = "invalid_collection"
    INVALID_PAGE_SIZE = "invalid_page_size"
    INVALID_CURSOR = "invalid_cursor"
    INVALID_REFERENCE = "invalid_reference"
    INVALID_EXPECTED_REVISION = "invalid_expected_revision"
    INVALID_ORIGIN = "invalid_origin"
    INVALID_KIND = "invalid_kind"
    INVALID_RECORD = "invalid_record"
    MUTATION_DISABLED = "mutation_disabled"
    DISALLOWED_CONTENT = "disallowed_content"
    NOT_FOUND = "not_found"
    REVISION_CONFLICT = "revision_conflict"
    WRITE_CONFLICT = "write_conflict"
    NOT_ARCHIVED = "not_archived"
    AMBIGUOUS_REFERENCE = "ambiguous_reference"
    STALE_CURSOR = "stale_cursor"
    REPLACEMENT_OUTCOME_UNCERTAIN = "replacement_outcome_uncertain"
    DELETION_OUTCOME_UNCERTAIN = "deletion_outcome_uncertain"
    MEMORY_SOURCE_UNAVAILABLE = "memory_source_unavailable"
    CANDIDATE_LIMIT_EXCEEDED = "candidate_limit_exceeded"
    MEMORY_BUSY = "memory_busy"
    INTERNAL_ERROR = "internal_error"

    def status(self, *, retrieval: bool = False) -> ErrorStatus:
        """The result status; recall reports storage trouble as a retrieval error instead."""
        if retrieval and self in _RETRIEVAL_CODES:
            return ErrorStatus.RETRIEVAL_ERROR
        return _STATUS[self]

    @property
    def message(self) -> str:
        """A fixed sentence that never repeats anything the caller or a file supplied."""
        return _MESSAGES[self]


_C = ErrorCode
_S = ErrorStatus

_STATUS: dict[ErrorCode, ErrorStatus] = {
    **dict.fromkeys(
        (
            _C.INVALID_QUERY,
            _C.INVALID_SCOPE,
            _C.INVALID_NAMESPACE,
            _C.INVALID_TAGS,
            _C.INVALID_REQUEST,
            _C.INVALID_COLLECTION,
            _C.INVALID_PAGE_SIZE,
            _C.INVALID_CURSOR,
            _C.INVALID_REFERENCE,
            _C.INVALID_EXPECTED_REVISION,
            _C.INVALID_ORIGIN,
            _C.INVALID_KIND,
            _C.INVALID_RECORD,
        ),
        _S.INVALID_REQUEST,
    ),
    _C.MUTATION_DISABLED: _S.POLICY_ERROR,
    _C.DISALLOWED_CONTENT: _S.REFUSED,
    _C.NOT_FOUND: _S.NOT_FOUND,
    **dict.fromkeys(
        (
            _C.REVISION_CONFLICT,
            _C.WRITE_CONFLICT,
            _C.NOT_ARCHIVED,
            _C.AMBIGUOUS_REFERENCE,
            _C.STALE_CURSOR,
        ),
        _S.CONFLICT,
    ),
    _C.REPLACEMENT_OUTCOME_UNCERTAIN: _S.UNCERTAIN,
    _C.DELETION_OUTCOME_UNCERTAIN: _S.UNCERTAIN,
    _C.MEMORY_SOURCE_UNAVAILABLE: _S.STORAGE_ERROR,
    _C.CANDIDATE_LIMIT_EXCEEDED: _S.STORAGE_ERROR,
    _C.MEMORY_BUSY: _S.STORAGE_ERROR,
    _C.INTERNAL_ERROR: _S.INTERNAL_ERROR,
}

_RETRIEVAL_CODES = frozenset({_C.MEMORY_SOURCE_UNAVAILABLE, _C.CANDIDATE_LIMIT_EXCEEDED})

_MESSAGES: dict[ErrorCode, str] = {
    _C.INVALID_QUERY: "query must be a non-blank string of at most 1000 characters",
    _C.INVALID_SCOPE: "scope must be one of the seven memory scopes",
    _C.INVALID_NAMESPACE: "namespace is not a valid canonical namespace selector",
    _C.INVALID_TAGS: "tags must be 1 to 10 unique strings of 1 to 50 characters",
    _C.INVALID_REQUEST: "the request does not match any accepted argument combination",
    _C.INVALID_COLLECTION: "collection is not a valid canonical collection selector",
    _C.INVALID_PAGE_SIZE: "page_size must be an integer from 1 to 100",
    _C.INVALID_CURSOR: "the cursor is not valid for this request; start a fresh listing",
    _C.INVALID_REFERENCE: "reference must be an exact version-1 or version-2 memory reference",
    _C.INVALID_EXPECTED_REVISION: "expected_revision must be a positive integer",
    _C.INVALID_ORIGIN: "origin must be explicit_user_statement or user_approved_proposal",
    _C.INVALID_KIND: "kind is not allowed for this scope",
    _C.INVALID_RECORD: "the memory record fields are invalid",
    _C.MUTATION_DISABLED: "this memory mutation is disabled by the operator",
    _C.DISALLOWED_CONTENT: (
        "memory field resembles content that Mnemosyne does not store; review the named "
        "field and retry only if the user confirms that the formatting is benign"
    ),
    _C.NOT_FOUND: "no memory exists for this reference",
    _C.REVISION_CONFLICT: "the memory is not at the expected revision; inspect it again",
    _C.WRITE_CONFLICT: "the memory changed during the write; inspect it again",
    _C.NOT_ARCHIVED: "only archived memory can be forgotten",
    _C.AMBIGUOUS_REFERENCE: "more than one legacy memory has this id",
    _C.STALE_CURSOR: (
        "the listing changed since the cursor was issued, or the cursor comes from a server "
        "that shares no cursor key with this one; start a fresh listing"
    ),
    _C.REPLACEMENT_OUTCOME_UNCERTAIN: (
        "the replacement may have happened; inspect the same reference before any retry"
    ),
    _C.DELETION_OUTCOME_UNCERTAIN: (
        "the deletion may have happened; inspect the same reference before any retry"
    ),
    _C.MEMORY_SOURCE_UNAVAILABLE: "the memory source is unavailable",
    _C.CANDIDATE_LIMIT_EXCEEDED: (
        "the selected memory source holds more candidate files than the candidate limit; "
        "the operator raises it with [memory] candidate_limit in ~/.mnemosyne/config.toml "
        "or MNEMOSYNE_MEMORY_CANDIDATE_LIMIT"
    ),
    _C.MEMORY_BUSY: (
        "another writer holds the memory lock; nothing was changed, retry in a few seconds"
    ),
    _C.INTERNAL_ERROR: "an unexpected error occurred",
}


class MemoryOperationError(Exception):
    """A memory operation failed with a stable code; field, reason and message add detail.

    ``field`` names the argument at fault (``namespace.kind`` for a member), ``reason``
    is one fixed word saying what is wrong with it, and ``message`` a fixed sentence
    replacing the code's generic one. None of them ever carries a value the caller or a
    file supplied, so the exception text (the message) is safe to log.
    """

    def __init__(
        self,
        code: ErrorCode,
        *,
        field: str | None = None,
        reason: str | None = None,
        message: str | None = None,
    ) -> None:
        super().__init__(message or code.message)
        self.code = code
        self.field = field
        self.reason = reason
        self.message = message or code.message

    def payload(self, *, retrieval: bool = False) -> dict[str, Any]:
        """The JSON-ready error result for this failure."""
        return error_payload(
            self.code,
            field=self.field,
            reason=self.reason,
            retrieval=retrieval,
            message=self.message,
        )


CANDIDATE_LIMIT_DEFAULT: Final = 200_000
"""How many ``*.json`` files one selection (a scope, namespace or collection) may hold.

It bounds the work and memory of one call and of the index: each indexed record costs
about 1-3 kB of memory, so the default allows 100,000 records in a scope with room to
grow, at roughly 100-300 MB. Remember refuses to grow a scope past it.
"""
CANDIDATE_LIMIT_MAX: Final = 1_000_000


def checked_candidate_limit(limit: object) -> int:
    """``limit`` when it is a whole number from 1 to `CANDIDATE_LIMIT_MAX`; else ValueError."""
    if type(limit) is not int or not 1 <= limit <= CANDIDATE_LIMIT_MAX:
        raise ValueError("candidate_limit must be an integer from 1 to 1,000,000")
    return limit


def candidate_limit_exceeded(limit: int, *, adding: bool = False) -> MemoryOperationError:
    """The refusal of a selection with more than ``limit`` candidate files or, when
    ``adding``, of a new record for a scope that already holds ``limit``. It names the
    limit and the setting that raises it (neither is content)."""
    held = (
        f"the scope already holds {limit} candidate files, the candidate limit, and no "
        "memory is added past it"
        if adding
        else f"the selected memory source holds more than {limit} candidate files, the "
        "candidate limit"
    )
    return MemoryOperationError(
        ErrorCode.CANDIDATE_LIMIT_EXCEEDED,
        message=(
            f"{held}; the operator raises it with [memory] candidate_limit in "
            f"~/.mnemosyne/config.toml or MNEMOSYNE_MEMORY_CANDIDATE_LIMIT (at most "
            f"{CANDIDATE_LIMIT_MAX})"
        ),
    )


def error_payload(
    code: ErrorCode,
    *,
    field: str | None = None,
    reason: str | None = None,
    retrieval: bool = False,
    message: str | None = None,
) -> dict[str, Any]:
    """Build ``{status, code, [field], [reason], message}`` for a failure."""
    payload: dict[str, Any] = {"status": code.status(retrieval=retrieval).value, "code": code.value}
    if field is not None:
        payload["field"] = field
    if reason is not None:
        payload["reason"] = reason
    payload["message"] = message or code.message
    return payload


# -- vocabulary: scopes, namespace kinds, memory kinds -------------------------------------


class Scope(StrEnum):
    """One of the seven top-level memory areas; each is also a directory name under the root."""

    SELF = "self"
    RELATIONSHIP = "relationship"
    PREFERENCE = "preference"
    PRACTICE = "practice"
    PROJECT = "project"
    KNOWLEDGE = "knowledge"
    AGENT = "agent"


# Declaration order above is the published order; tuples keep it stable for schemas.
NAMESPACE_KINDS: Mapping[Scope, tuple[str, ...]] = MappingProxyType(
    {
        Scope.SELF: ("aspect",),
        Scope.RELATIONSHIP: ("person", "group", "relationship"),
        Scope.PREFERENCE: ("domain",),
        Scope.PRACTICE: ("domain",),
        Scope.PROJECT: ("project",),
        Scope.KNOWLEDGE: ("topic",),
        Scope.AGENT: ("agent",),
    }
)

MEMORY_KINDS: Mapping[Scope, tuple[str, ...]] = MappingProxyType(
    {
        Scope.SELF: ("attribute",),
        Scope.RELATIONSHIP: ("perspective", "summary"),
        Scope.PREFERENCE: ("preference",),
        Scope.PRACTICE: ("practice",),
        Scope.PROJECT: (
            "decision",
            "constraint",
            "state",
            "event",
            "question",
            "reference",
            "summary",
        ),
        Scope.KNOWLEDGE: ("reference", "summary"),
        Scope.AGENT: ("persona", "policy", "checklist", "failure_mode"),
    }
)

EVENT_KIND = "event"


def parse_scope(value: object) -> Scope | None:
    """Return the scope named by ``value``, or None when it is not exactly one of the seven."""
    if type(value) is not str:
        return None
    try:
        return Scope(value)
    except ValueError:
        return None


def kind_requires_occurred_at(kind: str) -> bool:
    """Only events carry an occurrence time, and every event must carry one."""
    return kind == EVENT_KIND


# -- value grammars: ids, identifiers, language, text, tags, timestamps --------------------

CONTENT_MAX = 4000
TITLE_MAX = 200
LABEL_MAX = 100
# The largest revision: beyond 2**53 - 1 a JSON number loses exactness in most clients
# (JavaScript's among them), which could then never send the revision back exactly.
REVISION_MAX = 2**53 - 1
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


def has_surrogates(value: str) -> bool:
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
    if not _is_str(value) or has_surrogates(value):
        return None
    text = normalize_text(value)
    if not 1 <= len(text) <= maximum:
        return None
    return text


def normalize_tag(value: object) -> str | None:
    """Collapse internal whitespace of one tag; None unless the result has 1-50 characters."""
    if not _is_str(value) or has_surrogates(value):
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
    return _is_str(value) and _valid_timestamp(value)


# Records share their timestamps widely (a batch of writes, one creation second), so the
# verdicts are memoised; reading many files at start is where this pays.
@functools.lru_cache(maxsize=8192)
def _valid_timestamp(value: str) -> bool:
    if _TIMESTAMP.match(value) is None:
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


# -- records: legacy v1 and canonical v2 values and their JSON forms -----------------------

ORIGINS = ("explicit_user_statement", "user_approved_proposal", "manual", "import")
PUBLIC_ORIGINS = ORIGINS[:2]
RECORDED_VIA = ("memory_remember", "filesystem", "migration", "import")
LIFECYCLE_STATES = ("active", "archived")


@dataclass(frozen=True, slots=True)
class Namespace:
    """The container a canonical memory belongs to inside its scope."""

    kind: str
    id: str
    label: str | None

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "id": self.id, "label": self.label}


@dataclass(frozen=True, slots=True)
class Collection:
    """An optional sub-container inside a namespace."""

    id: str
    label: str | None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "label": self.label}


@dataclass(frozen=True, slots=True)
class Provenance:
    """Where a memory came from and which path recorded it."""

    origin: str
    recorded_via: str

    def to_json(self) -> dict[str, Any]:
        return {"origin": self.origin, "recorded_via": self.recorded_via}


@dataclass(frozen=True, slots=True)
class Lifecycle:
    """Active or archived, plus the revision counter used for optimistic concurrency."""

    state: str
    revision: int

    @property
    def archived(self) -> bool:
        return self.state == "archived"

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "revision": self.revision}


@dataclass(frozen=True, slots=True)
class MemoryRecordV1:
    """A read-only legacy record; its scope comes from where the file lives, not its body."""

    id: str
    content: str
    title: str | None = None
    tags: tuple[str, ...] | None = None

    schema_version = 1

    def to_json(self) -> dict[str, Any]:
        """The file form: optional members appear only when the record has them."""
        body: dict[str, Any] = {"schema_version": 1, "id": self.id}
        if self.title is not None:
            body["title"] = self.title
        body["content"] = self.content
        if self.tags is not None:
            body["tags"] = list(self.tags)
        return body

    def public_json(self) -> dict[str, Any]:
        """What inspection shows: every field v1 can represent, absent ones as null/empty."""
        return {
            "schema_version": 1,
            "id": self.id,
            "title": self.title,
            "content": self.content,
            "tags": list(self.tags or ()),
        }

    @property
    def all_tags(self) -> tuple[str, ...]:
        return self.tags or ()


@dataclass(frozen=True, slots=True)
class MemoryRecordV2:
    """A canonical, self-describing record whose identity fields also determine its path."""

    id: str
    scope: Scope
    namespace: Namespace
    collection: Collection | None
    kind: str
    language: str
    title: str | None
    content: str
    tags: tuple[str, ...]
    provenance: Provenance
    lifecycle: Lifecycle
    created_at: str
    updated_at: str
    occurred_at: str | None = None

    schema_version = 2

    @property
    def collection_id(self) -> str | None:
        return None if self.collection is None else self.collection.id

    @property
    def all_tags(self) -> tuple[str, ...]:
        return self.tags

    def to_json(self) -> dict[str, Any]:
        """The canonical member order used both on disk and in inspection results."""
        body: dict[str, Any] = {
            "schema_version": 2,
            "id": self.id,
            "scope": self.scope.value,
            "namespace": self.namespace.to_json(),
            "collection": None if self.collection is None else self.collection.to_json(),
            "kind": self.kind,
            "language": self.language,
            "title": self.title,
            "content": self.content,
            "tags": list(self.tags),
            "provenance": self.provenance.to_json(),
            "lifecycle": self.lifecycle.to_json(),
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }
        # Non-events never gain an invented null occurrence time.
        if self.occurred_at is not None:
            body["occurred_at"] = self.occurred_at
        return body

    def public_json(self) -> dict[str, Any]:
        return self.to_json()


MemoryRecord = MemoryRecordV1 | MemoryRecordV2


# -- references: the only way callers name one exact memory --------------------------------

_V1_KEYS = frozenset({"schema_version", "scope", "id"})
_V2_KEYS = frozenset({"schema_version", "scope", "namespace_id", "collection_id", "id"})


@dataclass(frozen=True, slots=True)
class V1Reference:
    """A legacy reference: scope plus a legacy id, which may be ambiguous on disk."""

    scope: Scope
    id: str

    schema_version = 1

    def to_json(self) -> dict[str, Any]:
        return {"schema_version": 1, "scope": self.scope.value, "id": self.id}


@dataclass(frozen=True, slots=True)
class V2Reference:
    """A canonical reference; it determines exactly one file path."""

    scope: Scope
    namespace_id: str
    collection_id: str | None
    id: str

    schema_version = 2

    def to_json(self) -> dict[str, Any]:
        return self.json_of(self.scope.value, self.namespace_id, self.collection_id, self.id)

    @staticmethod
    def json_of(
        scope: str, namespace_id: str, collection_id: str | None, memory_id: str
    ) -> dict[str, Any]:
        """The JSON form of a reference, from its parts (no object in between)."""
        return {
            "schema_version": 2,
            "scope": scope,
            "namespace_id": namespace_id,
            "collection_id": collection_id,
            "id": memory_id,
        }


MemoryReference = V1Reference | V2Reference


def parse_reference(value: object) -> MemoryReference | None:
    """Read a reference object exactly (no extra or missing members); None when invalid."""
    if type(value) is not dict:
        return None
    version = value.get("schema_version")
    if type(version) is not int:
        return None
    scope = parse_scope(value.get("scope"))
    if scope is None:
        return None
    if version == 1 and value.keys() == _V1_KEYS and is_legacy_id(value["id"]):
        return V1Reference(scope, value["id"])
    if version == 2 and value.keys() == _V2_KEYS:
        collection_id = value["collection_id"]
        if (
            is_identifier(value["namespace_id"])
            and (collection_id is None or is_identifier(collection_id))
            and is_memory_id(value["id"])
        ):
            return V2Reference(scope, value["namespace_id"], collection_id, value["id"])
    return None


def reference_of(record: MemoryRecord, scope: Scope) -> MemoryReference:
    """The reference of a record found in ``scope`` (v1 records take their directory's)."""
    if isinstance(record, MemoryRecordV2):
        return V2Reference(record.scope, record.namespace.id, record.collection_id, record.id)
    return V1Reference(scope, record.id)


# -- locations: where a record lives under the root ----------------------------------------

RECORD_SUFFIX = ".json"
# Directories allowed between a scope directory and a record file.
MAX_DIRECTORY_DEPTH = 4

# Path components from the memory root: (scope, ..., file name). Tuples, never strings,
# so no caller can smuggle a separator or ".." into a lookup.
RelativePath = tuple[str, ...]


def reference_parts(reference: V2Reference) -> RelativePath:
    """``(scope, namespace, [collection,] <id>.json)`` for a canonical reference."""
    middle: tuple[str, ...] = (reference.namespace_id,)
    if reference.collection_id is not None:
        middle += (reference.collection_id,)
    return (reference.scope.value, *middle, reference.id + RECORD_SUFFIX)


def location_agrees(parts: RelativePath, record: MemoryRecord) -> bool:
    """Whether a record may live at ``parts``.

    Canonical records must sit exactly at the path their identity determines. Legacy
    records have no identity-derived path, so any location inside a scope is theirs.
    """
    if not isinstance(record, MemoryRecordV2):
        return True
    expected = reference_parts(
        V2Reference(record.scope, record.namespace.id, record.collection_id, record.id)
    )
    return parts == expected
