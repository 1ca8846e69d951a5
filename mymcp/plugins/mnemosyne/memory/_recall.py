"""Recall: argument validation, the reference ranking (contract 5.5) and result items."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._index import MemoryIndex
from ._scan import IndexedRecord, ScanResult
from ._terms import RankCandidate, term_set
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

__all__ = [
    "RECALL_LIMIT",
    "RankCandidate",
    "RankedHit",
    "Ranker",
    "RecallQuery",
    "RecallRequest",
    "parse_recall_arguments",
    "reference_rank",
    "run_recall",
]

RECALL_LIMIT = 5
QUERY_MAX = 1000
_RECALL_KEYS = frozenset({"query", "scope", "namespace_id", "tags"})

# Weights of the reference ranking, strongest evidence first.
_REQUEST_TAG_WEIGHT = 4
_TITLE_WEIGHT = 3
_PATH_OR_TAG_WEIGHT = 2
_CONTENT_WEIGHT = 1


@dataclass(frozen=True, slots=True)
class RecallQuery:
    """The query side of ranking: query terms, casefolded request tags and the raw text.

    ``terms`` are the reference tokens (contract 5.5); rankers with their own analysis
    read ``text``, the normalised query as sent (empty when built from terms alone).
    """

    terms: frozenset[str]
    tag_keys: frozenset[str]
    text: str = ""


@dataclass(frozen=True, slots=True)
class RankedHit:
    """One kept candidate: its position in the input, score and match evidence."""

    position: int
    score: float
    matched_terms: frozenset[str]
    matched_tag_keys: frozenset[str]


# The one boundary a different ranking (e.g. BM25) plugs into.
Ranker = Callable[[RecallQuery, Sequence[RankCandidate], int], list[RankedHit]]


def reference_rank(
    query: RecallQuery, candidates: Sequence[RankCandidate], limit: int = RECALL_LIMIT
) -> list[RankedHit]:
    """Score by set overlap: 4x request tags, 3x title, 2x path/tags, 1x content terms.

    Frequencies play no part. Candidates scoring 0 are dropped; ties fall back to the
    scope-relative path and then the id, so the order is fully deterministic.
    """
    hits: list[tuple[RankedHit, RankCandidate]] = []
    query_terms, query_tags = query.terms, query.tag_keys
    for position, candidate in enumerate(candidates):
        terms = candidate.terms
        # Most records share no term with the query; one C-level check rules them out.
        if query_terms.isdisjoint(terms.every_term) and query_tags.isdisjoint(terms.tag_keys):
            continue
        tags = query.tag_keys & terms.tag_keys
        title = query.terms & terms.title
        path_or_tag = query.terms & terms.path_and_tags
        content = query.terms & terms.content
        score = (
            _REQUEST_TAG_WEIGHT * len(tags)
            + _TITLE_WEIGHT * len(title)
            + _PATH_OR_TAG_WEIGHT * len(path_or_tag)
            + _CONTENT_WEIGHT * len(content)
        )
        if score > 0:
            hit = RankedHit(position, score, title | path_or_tag | content, tags)
            hits.append((hit, candidate))
    hits.sort(key=lambda pair: (-pair[0].score, pair[1].path, pair[1].id))
    return [hit for hit, _ in hits[:limit]]


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
    ranker: Ranker = reference_rank,
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
    query = RecallQuery(
        term_set(request.query), frozenset(tag_key(t) for t in request.tags), request.query
    )
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
