"""Recall tokenisation and the per-record term structure cached by the index."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from itertools import filterfalse

from ._tokenize import analyze
from .model import MemoryRecord, tag_key

__all__ = [
    "STOP_WORDS",
    "FieldTerms",
    "RankCandidate",
    "RecordTerms",
    "extract_record_terms",
    "term_set",
    "tokenize",
]

# Runs of characters that are alphanumeric but not the underscore (``\w`` minus ``_``),
# two or more long: underscores split tokens, so ``mem_abc`` yields ``mem`` and ``abc``;
# runs are maximal, so a 1-character run never matches and a longer one matches whole.
_TOKEN = re.compile(r"[^\W_]{2,}")

STOP_WORDS = frozenset(
    {
        "a", "an", "and", "are", "do", "does", "for", "how", "i", "in", "is", "it",
        "of", "on", "or", "the", "to", "user", "what", "when", "where", "which", "who", "why",
    }
)  # fmt: skip


def tokenize(text: str) -> tuple[str, ...]:
    """Casefolded tokens in order, without 1-character tokens and stop words."""
    return tuple(filterfalse(STOP_WORDS.__contains__, _TOKEN.findall(text.casefold())))


def term_set(text: str) -> frozenset[str]:
    return frozenset(tokenize(text))


@dataclass(frozen=True, slots=True, eq=False)
class FieldTerms:
    """Ranking terms of one record (see ``_tokenize``), counted per field.

    ``tf`` maps a term to its (title, meta, content) occurrence counts, where meta is the
    scope-relative path plus the record tags; ``lengths``
    are the three field lengths in terms. Built once per file version, never mutated.
    """

    tf: dict[str, tuple[int, int, int]]
    lengths: tuple[int, int, int]


def field_terms(title: str | None, meta: list[str], content: str) -> FieldTerms:
    """Count the ranking terms of a record's title, meta texts and content."""
    title_terms = analyze(title) if title else []
    meta_terms = [term for text in meta for term in analyze(text)]
    content_terms = analyze(content)
    # Content holds most terms: count it in one pass, then fold in the few others.
    tf = {term: (0, 0, count) for term, count in Counter(content_terms).items()}
    for term, count in Counter(meta_terms).items():
        held = tf.get(term)
        tf[term] = (0, count, 0 if held is None else held[2])
    for term, count in Counter(title_terms).items():
        held = tf.get(term)
        tf[term] = (count, 0, 0) if held is None else (count, held[1], held[2])
    return FieldTerms(tf, (len(title_terms), len(meta_terms), len(content_terms)))


@dataclass(frozen=True, slots=True)
class RecordTerms:
    """Everything a ranker needs to know about one record, extracted once per file version.

    Token tuples keep order and multiplicity for rankers that weigh frequency; the sets
    are what the reference ranking counts.
    """

    title_tokens: tuple[str, ...]
    content_tokens: tuple[str, ...]
    path_tokens: tuple[str, ...]
    tag_tokens: tuple[str, ...]
    title: frozenset[str]
    content: frozenset[str]
    path_and_tags: frozenset[str]
    tag_keys: frozenset[str]
    every_term: frozenset[str]
    fields: FieldTerms


class RankCandidate:
    """The record side of ranking: identity for tie-breaks plus cached terms.

    Built either with its terms, or with the record they are extracted from on first
    use: only recall needs terms, so listing, inspecting and remembering never pay for
    tokenising a record. Compares by identity (a changed file is a new candidate).
    """

    __slots__ = ("_record", "_terms", "id", "path")

    def __init__(
        self,
        id: str,
        path: str,
        terms: RecordTerms | None = None,
        *,
        record: MemoryRecord | None = None,
    ) -> None:
        if (terms is None) == (record is None):
            raise ValueError("give a candidate either its terms or its record")
        self.id = id
        self.path = path
        self._terms = terms
        self._record = record

    @property
    def terms(self) -> RecordTerms:
        terms = self._terms
        if terms is None:
            record = self._record
            assert record is not None
            # Racing threads may both extract; they compute equal values.
            terms = self._terms = extract_record_terms(record, self.path)
            self._record = None
        return terms

    def __repr__(self) -> str:
        return f"RankCandidate(id={self.id!r}, path={self.path!r})"


def extract_record_terms(record: MemoryRecord, scope_relative_path: str) -> RecordTerms:
    """Tokenise a record's title, content, location and tags."""
    title_tokens = tokenize(record.title or "")
    content_tokens = tokenize(record.content)
    path_tokens = tokenize(scope_relative_path)
    tags = record.all_tags
    tag_tokens = tuple(token for tag in tags for token in tokenize(tag))
    tag_keys = frozenset(tag_key(tag) for tag in tags)
    # Whole tag phrases also count as tag terms, so a one-word tag matches even when it
    # would otherwise be tokenised differently from the query.
    title = frozenset(title_tokens)
    content = frozenset(content_tokens)
    path_and_tags = frozenset(path_tokens) | frozenset(tag_tokens) | tag_keys
    return RecordTerms(
        title_tokens=title_tokens,
        content_tokens=content_tokens,
        path_tokens=path_tokens,
        tag_tokens=tag_tokens,
        title=title,
        content=content,
        path_and_tags=path_and_tags,
        tag_keys=tag_keys,
        every_term=title | content | path_and_tags,
        fields=field_terms(
            record.title,
            [scope_relative_path, *tags],
            record.content,
        ),
    )
