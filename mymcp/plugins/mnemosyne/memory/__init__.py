"""Mnemosyne's memory domain: records, discovery, recall, listing and inspection.

Pure domain code with no MCP or HTTP types. The service takes raw tool arguments and
returns JSON-ready results; everything else here is the vocabulary it is built from.
"""

from ._cursor import CursorCodec
from ._errors import ErrorCode, ErrorStatus, MemoryOperationError, error_payload
from ._filesystem import FileStamp
from ._identifiers import (
    is_identifier,
    is_legacy_id,
    is_memory_id,
    is_timestamp,
    normalize_language,
    normalize_tags,
    normalize_text,
    utc_now_seconds,
)
from ._index import IndexedRecord, MemoryIndex
from ._outcomes import ToolOutcome
from ._paths import RelativePath, reference_parts
from ._recall import RankCandidate, RankedHit, Ranker, RecallQuery, reference_rank
from ._record_format import (
    MAX_RECORD_BYTES,
    RecordRejected,
    SkipReason,
    parse_record,
    serialize_record,
)
from ._records import (
    Collection,
    Lifecycle,
    MemoryRecord,
    MemoryRecordV1,
    MemoryRecordV2,
    Namespace,
    Provenance,
)
from ._references import MemoryReference, V1Reference, V2Reference, parse_reference, reference_of
from ._scopes import KIND_GUIDANCE, MEMORY_KINDS, NAMESPACE_KINDS, Scope, kind_requires_occurred_at
from ._service import CANDIDATE_LIMIT_DEFAULT, CANDIDATE_LIMIT_MAX, MemoryService
from ._terms import RecordTerms, tokenize

__all__ = [
    "CANDIDATE_LIMIT_DEFAULT",
    "CANDIDATE_LIMIT_MAX",
    "KIND_GUIDANCE",
    "MAX_RECORD_BYTES",
    "MEMORY_KINDS",
    "NAMESPACE_KINDS",
    "Collection",
    "CursorCodec",
    "ErrorCode",
    "ErrorStatus",
    "FileStamp",
    "IndexedRecord",
    "Lifecycle",
    "MemoryIndex",
    "MemoryOperationError",
    "MemoryRecord",
    "MemoryRecordV1",
    "MemoryRecordV2",
    "MemoryReference",
    "MemoryService",
    "Namespace",
    "Provenance",
    "RankCandidate",
    "RankedHit",
    "Ranker",
    "RecallQuery",
    "RecordRejected",
    "RecordTerms",
    "RelativePath",
    "Scope",
    "SkipReason",
    "ToolOutcome",
    "V1Reference",
    "V2Reference",
    "error_payload",
    "is_identifier",
    "is_legacy_id",
    "is_memory_id",
    "is_timestamp",
    "kind_requires_occurred_at",
    "normalize_language",
    "normalize_tags",
    "normalize_text",
    "parse_record",
    "parse_reference",
    "reference_of",
    "reference_parts",
    "reference_rank",
    "serialize_record",
    "tokenize",
    "utc_now_seconds",
]
