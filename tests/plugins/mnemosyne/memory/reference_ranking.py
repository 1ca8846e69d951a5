"""The reference recall ranking of the product this one replaces, kept as a yardstick.

Set overlap, no term frequency: 4 per request tag the record carries, 3 per query term in
the title, 2 per query term in the scope-relative path or the tags, 1 per query term in
the content. Tokens are casefolded runs of letters and digits (the underscore splits),
without 1-character tokens and a fixed 24-word stop list. Ties fall back to the
scope-relative path, then the id. The server never ranks this way; the recall-quality
test and ``bench/recall_quality.py`` compare the default ranking against it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import filterfalse
from pathlib import Path

from mymcp.plugins.mnemosyne.memory import MemoryRecord, MemoryRecordV2, parse_record, tag_key

__all__ = ["STOP_WORDS", "Ranked", "load_records", "reference_rank", "tokenize"]

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


@dataclass(frozen=True, slots=True)
class Ranked:
    """One kept record: its id, score and the query terms it matched."""

    id: str
    path: str
    score: int
    matched_terms: frozenset[str]


def reference_rank(
    query: str,
    tags: Iterable[str],
    records: Sequence[tuple[str, MemoryRecord]],
    limit: int = 5,
) -> list[Ranked]:
    """Rank ``(scope-relative path, record)`` pairs for ``query`` and request ``tags``."""
    terms = frozenset(tokenize(query))
    wanted = frozenset(tag_key(tag) for tag in tags)
    hits: list[Ranked] = []
    for path, record in records:
        if isinstance(record, MemoryRecordV2) and record.lifecycle.archived:
            continue  # never recalled
        record_tags = record.all_tags
        tag_keys = frozenset(tag_key(tag) for tag in record_tags)
        tag_terms = frozenset(token for tag in record_tags for token in tokenize(tag))
        title = terms & frozenset(tokenize(record.title or ""))
        path_or_tag = terms & (frozenset(tokenize(path)) | tag_terms | tag_keys)
        content = terms & frozenset(tokenize(record.content))
        score = 4 * len(wanted & tag_keys) + 3 * len(title) + 2 * len(path_or_tag) + len(content)
        if score > 0:
            hits.append(Ranked(record.id, path, score, title | path_or_tag | content))
    hits.sort(key=lambda hit: (-hit.score, hit.path, hit.id))
    return hits[:limit]


def load_records(scope_directory: Path) -> list[tuple[str, MemoryRecord]]:
    """Every record file under one scope directory, with its scope-relative path."""
    found = []
    for path in sorted(scope_directory.rglob("*.json")):
        record = parse_record(path.read_bytes())
        found.append((path.relative_to(scope_directory).as_posix(), record))
    return found
