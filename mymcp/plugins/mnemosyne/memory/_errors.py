"""Stable error codes, their result statuses, fixed messages and the domain exception."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

__all__ = [
    "ErrorCode",
    "ErrorStatus",
    "MemoryOperationError",
    "error_payload",
]


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
    _C.STALE_CURSOR: "the listing changed since the cursor was issued; start a fresh listing",
    _C.REPLACEMENT_OUTCOME_UNCERTAIN: (
        "the replacement may have happened; inspect the same reference before any retry"
    ),
    _C.DELETION_OUTCOME_UNCERTAIN: (
        "the deletion may have happened; inspect the same reference before any retry"
    ),
    _C.MEMORY_SOURCE_UNAVAILABLE: "the memory source is unavailable",
    _C.CANDIDATE_LIMIT_EXCEEDED: "the selected memory source holds too many candidate files",
    _C.INTERNAL_ERROR: "an unexpected error occurred",
}


class MemoryOperationError(Exception):
    """A memory operation failed with a stable code; field and reason are optional detail.

    The exception text is the fixed message only, so logging it can never leak values.
    """

    def __init__(
        self, code: ErrorCode, *, field: str | None = None, reason: str | None = None
    ) -> None:
        super().__init__(code.message)
        self.code = code
        self.field = field
        self.reason = reason

    def payload(self, *, retrieval: bool = False) -> dict[str, Any]:
        """The JSON-ready error result for this failure."""
        return error_payload(self.code, field=self.field, reason=self.reason, retrieval=retrieval)


def error_payload(
    code: ErrorCode,
    *,
    field: str | None = None,
    reason: str | None = None,
    retrieval: bool = False,
) -> dict[str, Any]:
    """Build ``{status, code, [field], [reason], message}`` for a failure."""
    payload: dict[str, Any] = {"status": code.status(retrieval=retrieval).value, "code": code.value}
    if field is not None:
        payload["field"] = field
    if reason is not None:
        payload["reason"] = reason
    payload["message"] = code.message
    return payload
