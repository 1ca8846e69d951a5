"""Recall: argument validation, ranking through the service's ranker and result items."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .index import IndexedRecord, MemoryIndex, ScanResult
from .model import (
    ErrorCode,
    MemoryOperationError,
    MemoryRecordV2,
    Scope,
    is_identifier,
    normalize_tags,
    normalize_text,
    parse_scope,
    reference_of,
    tag_key,
)
from .search import Bm25Ranker, RankCandidate, RankedHit, RecallQuery

__all__ = ["RECALL_LIMIT", "RecallRequest", "parse_recall_arguments", "run_recall"]

RECALL_LIMIT = 5
QUERY_MAX = 1000
_RECALL_KEYS = frozenset({"query", "scope", "namespace_id", "tags"})


@dataclass(frozen=True, slots=True)
class RecallRequest:
    """Validated recall arguments."""

    scope: Scope
    query: str
    namespace_id: str | None
    tags: tuple[str, ...]


def parse_recall_arguments(arguments: Mapping[str, Any]) -> RecallRequest:
    """Validate raw tool arguments by hand; the first failing field decides the code."""
    if not isinstance(arguments, Mapping) or not arguments.keys() <= _RECALL_KEYS:
        raise MemoryOperationError(ErrorCode.INVALID_QUERY)
    query = arguments.get("query")
    if type(query) is not str or len(query) > QUERY_MAX or not normalize_text(query):
        raise MemoryOperationError(ErrorCode.INVALID_QUERY)
    scope = parse_scope(arguments.get("scope"))
    if scope is None:
        raise MemoryOperationError(ErrorCode.INVALID_SCOPE)
    namespace_id = arguments.get("namespace_id")
    if "namespace_id" in arguments and not is_identifier(namespace_id):
        raise MemoryOperationError(ErrorCode.INVALID_NAMESPACE)
    tags: tuple[str, ...] = ()
    if "tags" in arguments:
        parsed = normalize_tags(arguments["tags"], minimum=1)
        if parsed is None:
            raise MemoryOperationError(ErrorCode.INVALID_TAGS)
        tags = parsed
    return RecallRequest(scope, normalize_text(query), namespace_id, tags)


def run_recall(
    index: MemoryIndex,
    request: RecallRequest,
    *,
    candidate_limit: int,
    ranker: Bm25Ranker,
) -> dict[str, Any]:
    """Rank the selected, non-archived records and return at most five as result items."""
    container = () if request.namespace_id is None else (request.namespace_id,)
    scan = index.scan(
        request.scope,
        container,
        recursive=True,
        candidate_limit=candidate_limit,
        include_legacy=request.namespace_id is None,
    )
    eligible, candidates = index.derive(scan, "recall", _eligible)
    query = RecallQuery(request.query, frozenset(tag_key(t) for t in request.tags))
    hits = ranker(query, candidates, RECALL_LIMIT)[:RECALL_LIMIT]
    memories = [_result_item(eligible[hit.position], hit) for hit in hits]
    return {"status": "ok" if memories else "no_matches", "memories": memories}


def _eligible(
    scan: ScanResult,
) -> tuple[tuple[IndexedRecord, ...], tuple[RankCandidate, ...]]:
    """The non-archived records of a scan and their ranking candidates, position-aligned."""
    eligible = tuple(
        item
        for item in scan.records
        if not (isinstance(item.record, MemoryRecordV2) and item.record.lifecycle.archived)
    )
    return eligible, tuple(item.candidate for item in eligible)


def _result_item(item: IndexedRecord, hit: RankedHit) -> dict[str, Any]:
    record = item.record
    # Evidence uses the record's own tag spelling, in record order.
    matched_tags = [tag for tag in record.all_tags if tag_key(tag) in hit.matched_tag_keys]
    return {
        "reference": reference_of(record, item.scope).to_json(),
        "id": record.id,
        "scope": item.scope.value,
        "title": record.title,
        "content": record.content,
        "tags": list(record.all_tags),
        "match": {"terms": sorted(hit.matched_terms), "tags": matched_tags},
    }
