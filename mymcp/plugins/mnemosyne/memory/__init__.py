"""Mnemosyne's memory domain: records, index, recall, listing, inspection and mutations.

Pure domain code with no MCP or HTTP types. The service takes raw tool arguments and
returns JSON-ready results; everything else here is the vocabulary it is built from.
"""

from ._bm25 import Bm25Parameters, Bm25Ranker, default_ranker
from ._cursor import CursorCodec
from ._errors import ErrorCode, ErrorStatus, MemoryOperationError, error_payload
from ._filesystem import FileStamp
from ._identifiers import (
    CONTENT_MAX,
    LABEL_MAX,
    TITLE_MAX,
    format_timestamp,
    is_identifier,
    is_legacy_id,
    is_memory_id,
    is_timestamp,
    normalize_bounded_text,
    normalize_language,
    normalize_tag,
    normalize_tags,
    normalize_text,
    tag_key,
    utc_now_seconds,
)
from ._index import MemoryIndex
from ._locking import LOCK_FILE_NAME, root_lock
from ._mutations import IndexProvider, MutationService, new_memory_id
from ._outcomes import ToolOutcome
from ._paths import RelativePath, reference_parts
from ._policy import PolicyReason, enforce_content_policy, find_disallowed
from ._recall import RankCandidate, RankedHit, Ranker, RecallQuery, reference_rank
from ._record_format import (
    MAX_RECORD_BYTES,
    RecordRejected,
    SkipReason,
    parse_record,
    serialize_record,
)
from ._records import (
    ORIGINS,
    PUBLIC_ORIGINS,
    RECORDED_VIA,
    Collection,
    Lifecycle,
    MemoryRecord,
    MemoryRecordV1,
    MemoryRecordV2,
    Namespace,
    Provenance,
)
from ._references import MemoryReference, V1Reference, V2Reference, parse_reference, reference_of
from ._scan import IndexedRecord, ScanResult
from ._scopes import KIND_GUIDANCE, MEMORY_KINDS, NAMESPACE_KINDS, Scope, kind_requires_occurred_at
from ._service import CANDIDATE_LIMIT_DEFAULT, CANDIDATE_LIMIT_MAX, MemoryService
from ._terms import RecordTerms, tokenize
from ._writer import RecordWriter, ensure_root, file_digest

__all__ = [
    "CANDIDATE_LIMIT_DEFAULT",
    "CANDIDATE_LIMIT_MAX",
    "CONTENT_MAX",
    "KIND_GUIDANCE",
    "LABEL_MAX",
    "LOCK_FILE_NAME",
    "MAX_RECORD_BYTES",
    "MEMORY_KINDS",
    "NAMESPACE_KINDS",
    "ORIGINS",
    "PUBLIC_ORIGINS",
    "RECORDED_VIA",
    "TITLE_MAX",
    "Bm25Parameters",
    "Bm25Ranker",
    "Collection",
    "CursorCodec",
    "default_ranker",
    "enforce_content_policy",
    "ensure_root",
    "error_payload",
    "ErrorCode",
    "ErrorStatus",
    "file_digest",
    "FileStamp",
    "find_disallowed",
    "format_timestamp",
    "IndexedRecord",
    "IndexProvider",
    "is_identifier",
    "is_legacy_id",
    "is_memory_id",
    "is_timestamp",
    "kind_requires_occurred_at",
    "Lifecycle",
    "MemoryIndex",
    "MemoryOperationError",
    "MemoryRecord",
    "MemoryRecordV1",
    "MemoryRecordV2",
    "MemoryReference",
    "MemoryService",
    "MutationService",
    "Namespace",
    "new_memory_id",
    "normalize_bounded_text",
    "normalize_language",
    "normalize_tag",
    "normalize_tags",
    "normalize_text",
    "parse_record",
    "parse_reference",
    "PolicyReason",
    "Provenance",
    "RankCandidate",
    "RankedHit",
    "Ranker",
    "RecallQuery",
    "RecordRejected",
    "RecordTerms",
    "RecordWriter",
    "reference_of",
    "reference_parts",
    "reference_rank",
    "RelativePath",
    "root_lock",
    "ScanResult",
    "Scope",
    "serialize_record",
    "SkipReason",
    "tag_key",
    "tokenize",
    "ToolOutcome",
    "utc_now_seconds",
    "V1Reference",
    "V2Reference",
]
