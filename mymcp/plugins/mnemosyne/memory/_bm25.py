"""BM25F recall ranking over an incrementally maintained in-memory inverted index.

Scoring (all parts positive, larger is better):

* Each record has three fields: title, meta (the scope-relative path plus the record
  tags) and content. A term's pseudo frequency is the weighted sum of its per-field
  counts, each divided by that field's length normalisation
  ``1 - b + b * length / average length`` (BM25F).
* A query term contributes ``idf * tf~ / (k1 + tf~)`` with the always-positive
  ``idf = ln(1 + (N - df + 0.5) / (df + 0.5))`` over the candidates of the call. Query
  terms count once each; common words need no stop list, their IDF is near zero.
* Each request tag a record carries (exact, whitespace-normalised, casefolded) adds more
  than any text score can reach, so tag matches always rank first. The field weights
  then order single-term evidence: title over path/tags over content.
* Records with no matching term or tag are dropped. Ties fall back to the scope-relative
  path, then the id.

Cost: the index of a candidate set is kept between calls and patched only for records
that appeared, vanished or changed (a changed file is a new candidate object). Scoring
walks the postings of the query terms, rarest first, and stops opening new records as
soon as the remaining terms cannot lift an unseen record into the top results
(MaxScore), so very common words only touch records that are already contenders. A
term's per-record contributions ``idf * tf~ / (tf~ + k1)`` depend only on the candidate
set, so they are computed on the term's first use and kept until the set changes; a
call then only adds them up, in the same order (and so to the same float) as before.
"""

from __future__ import annotations

import heapq
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from ._recall import RankCandidate, RankedHit, RecallQuery
from ._terms import FieldTerms
from ._tokenize import query_terms, word_patterns

__all__ = ["Bm25Parameters", "Bm25Ranker", "default_ranker"]

_Counts = tuple[int, int, int]
# key -> one term's score contribution to that record, over one corpus state.
_Contributions = dict[int, float]
# Terms whose contributions a corpus keeps; beyond that the memo starts over.
_MAX_MEMO_TERMS = 4096
# Relative margin when dropping contenders that can no longer reach the top results; far
# above the rounding error of summing a query's term scores, far below any real gap.
_SLACK = 1e-9


@dataclass(frozen=True, slots=True)
class Bm25Parameters:
    """Saturation ``k1``; per-field weight and length normalisation (title, meta, content)."""

    k1: float = 1.5
    weights: tuple[float, float, float] = (5.0, 2.0, 1.0)
    b: tuple[float, float, float] = (0.1, 0.3, 0.85)


class _Corpus:
    """Postings and length statistics of one candidate set, patched in place."""

    __slots__ = (
        "key",
        "members",
        "memo",
        "norms",
        "positions",
        "postings",
        "present",
        "tags",
        "totals",
    )

    def __init__(self) -> None:
        self.key: Sequence[RankCandidate] | None = None
        # id(candidate) -> candidate; holding the object keeps its id unique.
        self.members: dict[int, RankCandidate] = {}
        self.postings: dict[str, dict[int, _Counts]] = {}
        self.tags: dict[str, set[int]] = {}
        self.totals = [0, 0, 0]
        # How many records have a non-empty title / meta / content: a field's average
        # length is taken over the records that have it, so one titled note among many
        # untitled ones is not judged "long".
        self.present = [0, 0, 0]
        self.positions: dict[int, int] = {}
        # id(candidate) -> per-field weight / length normalisation; rebuilt after changes.
        self.norms: dict[int, tuple[float, float, float]] = {}
        # term -> contributions under the current norms and counts; cleared with them.
        self.memo: dict[str, _Contributions] = {}

    def add(self, key: int, candidate: RankCandidate) -> None:
        self.members[key] = candidate
        fields: FieldTerms = candidate.terms.fields
        postings = self.postings
        for term, counts in fields.tf.items():
            bucket = postings.get(term)
            if bucket is None:
                postings[term] = {key: counts}
            else:
                bucket[key] = counts
        for tag in candidate.terms.tag_keys:
            self.tags.setdefault(tag, set()).add(key)
        for field, length in enumerate(fields.lengths):
            self.totals[field] += length
            self.present[field] += length > 0

    def remove(self, key: int) -> None:
        candidate = self.members.pop(key)
        fields = candidate.terms.fields
        postings = self.postings
        for term in fields.tf:
            bucket = postings[term]
            del bucket[key]
            if not bucket:
                del postings[term]
        for tag in candidate.terms.tag_keys:
            holders = self.tags[tag]
            holders.discard(key)
            if not holders:
                del self.tags[tag]
        for field, length in enumerate(fields.lengths):
            self.totals[field] -= length
            self.present[field] -= length > 0

    def sync(self, candidates: Sequence[RankCandidate], params: Bm25Parameters) -> None:
        """Make this corpus describe exactly ``candidates``, touching only the difference."""
        current = {id(candidate): candidate for candidate in candidates}
        members = self.members
        if current.keys() != members.keys() or self.key is None:
            for key in members.keys() - current.keys():
                self.remove(key)
            for key in current.keys() - members.keys():
                self.add(key, current[key])
            self._renormalize(params)
        self.positions = {id(candidate): index for index, candidate in enumerate(candidates)}
        self.key = candidates

    def contributions(
        self, term: str, idf: float, bucket: dict[int, _Counts], k1: float
    ) -> _Contributions:
        """``key -> idf * tf~ / (tf~ + k1)`` for the records holding ``term``, memoised.

        ``idf`` must be the term's IDF over this corpus state (it is fixed by it).
        """
        found = self.memo.get(term)
        if found is None:
            norms = self.norms
            found = {}
            for key, counts in bucket.items():
                n = norms[key]
                tf = counts[0] * n[0] + counts[1] * n[1] + counts[2] * n[2]
                found[key] = idf * tf / (tf + k1)
            if len(self.memo) >= _MAX_MEMO_TERMS:
                self.memo.clear()
            self.memo[term] = found
        return found

    def _renormalize(self, params: Bm25Parameters) -> None:
        self.memo.clear()
        averages = [
            total / present if present else 1.0
            for total, present in zip(self.totals, self.present, strict=True)
        ]
        (w0, w1, w2), (b0, b1, b2) = params.weights, params.b
        a0, a1, a2 = b0 / averages[0], b1 / averages[1], b2 / averages[2]
        c0, c1, c2 = 1 - b0, 1 - b1, 1 - b2
        self.norms = {
            key: (
                w0 / (c0 + a0 * lengths[0]),
                w1 / (c1 + a1 * lengths[1]),
                w2 / (c2 + a2 * lengths[2]),
            )
            for key, candidate in self.members.items()
            for lengths in (candidate.terms.fields.lengths,)
        }


class Bm25Ranker:
    """A :data:`~._recall.Ranker` scoring with BM25F; one instance per memory service.

    It remembers the index of the last few candidate sets it was given. Handing it the
    very same sequence object again (the memory index does so while no file changed)
    skips all bookkeeping; a different sequence is diffed against the closest cached one.
    Calls are serialised by an internal lock.
    """

    def __init__(self, params: Bm25Parameters | None = None, *, cached_sets: int = 4) -> None:
        self.params = params or Bm25Parameters()
        self._cached_sets = cached_sets
        self._corpora: list[_Corpus] = []  # most recently used last
        self._lock = threading.Lock()
        word_patterns()  # compile the tokenizer now, at startup, not on the first recall

    def __call__(
        self, query: RecallQuery, candidates: Sequence[RankCandidate], limit: int
    ) -> list[RankedHit]:
        with self._lock:
            corpus = self._corpus_for(candidates)
            return self._rank(corpus, query, candidates, limit)

    def _corpus_for(self, candidates: Sequence[RankCandidate]) -> _Corpus:
        corpora = self._corpora
        for index in range(len(corpora) - 1, -1, -1):
            if corpora[index].key is candidates:
                corpus = corpora.pop(index)
                corpora.append(corpus)
                return corpus
        wanted = {id(candidate) for candidate in candidates}
        best, best_overlap = None, 0
        for corpus in corpora:
            overlap = len(wanted & corpus.members.keys())
            if overlap > best_overlap:
                best, best_overlap = corpus, overlap
        if best is None:
            best = _Corpus()
            if len(corpora) >= self._cached_sets:
                corpora.pop(0)
        else:
            corpora.remove(best)
        corpora.append(best)
        best.sync(candidates, self.params)
        return best

    def _rank(
        self,
        corpus: _Corpus,
        query: RecallQuery,
        candidates: Sequence[RankCandidate],
        limit: int,
    ) -> list[RankedHit]:
        if limit <= 0 or not corpus.members:
            return []
        surfaces: dict[str, list[str]] = {}
        for surface, term in _query_pairs(query):
            surfaces.setdefault(term, []).append(surface)
        count = len(corpus.members)
        weighted: list[tuple[float, str, dict[int, _Counts]]] = []
        for term in surfaces:
            bucket = corpus.postings.get(term)
            if bucket:
                df = len(bucket)
                weighted.append((math.log(1 + (count - df + 0.5) / (df + 0.5)), term, bucket))
        # Rarest first; the term breaks IDF ties so the float sums are reproducible.
        weighted.sort(key=lambda item: (-item[0], item[1]))
        # A term adds less than its IDF, so this bounds every record's text score.
        ceiling = sum(idf for idf, _, _ in weighted) + 1.0
        scores: dict[int, float] = {}
        matched_tags: dict[int, set[str]] = {}
        for tag in query.tag_keys:
            for key in corpus.tags.get(tag, ()):
                scores[key] = scores.get(key, 0.0) + ceiling
                matched_tags.setdefault(key, set()).add(tag)
        remaining = ceiling - 1.0
        k1 = self.params.k1
        # Once no unseen record can reach the top it never can again: scores only grow
        # (so the threshold only rises) and ``remaining`` only shrinks.
        pruning = False
        for idf, term, bucket in weighted:
            gains = corpus.contributions(term, idf, bucket, k1)
            if len(scores) < limit:
                pruning = pruning or remaining < 0.0
            elif pruning or remaining < max(scores.values()):  # else the threshold is lower
                threshold = heapq.nlargest(limit, scores.values())[-1]
                if remaining < threshold:
                    # No record without a score yet can reach the top any more: from now
                    # on only contenders are updated. A contender that stays below the
                    # threshold even if every remaining term adds its full IDF is out for
                    # good (the threshold only rises), so it is dropped; the slack keeps
                    # float rounding from ever dropping a record that could tie.
                    pruning = True
                    floor = threshold - remaining - _SLACK * (1.0 + threshold)
                    if min(scores.values()) < floor:
                        scores = {key: score for key, score in scores.items() if score >= floor}
            if pruning:
                if len(gains) < len(scores):
                    for key, gain in gains.items():
                        held = scores.get(key)
                        if held is not None:
                            scores[key] = held + gain
                else:
                    for key, score in scores.items():
                        found = gains.get(key)
                        if found is not None:
                            scores[key] = score + found
            elif scores:
                merged = dict(gains)
                for key in gains.keys() & scores.keys():
                    merged[key] = scores[key] + gains[key]
                scores.update(merged)
            else:
                scores = dict(gains)
            remaining -= idf
        if not scores:
            return []
        cutoff = heapq.nlargest(limit, scores.values())[-1]
        members, positions = corpus.members, corpus.positions
        contenders = sorted(
            (key for key, score in scores.items() if score >= cutoff),
            key=lambda key: (-scores[key], members[key].path, members[key].id),
        )[:limit]
        hits = []
        for key in contenders:
            record_tf = members[key].terms.fields.tf
            terms = frozenset(
                surface
                for term, forms in surfaces.items()
                if term in record_tf
                for surface in forms
            )
            tags = frozenset(matched_tags.get(key, ()))
            hits.append(RankedHit(positions[key], scores[key], terms, tags))
        return hits


def _query_pairs(query: RecallQuery) -> list[tuple[str, str]]:
    if query.text:
        return query_terms(query.text)
    # A query built from bare terms (e.g. by a test) is analysed term by term.
    return [pair for term in sorted(query.terms) for pair in query_terms(term)]


def default_ranker() -> Bm25Ranker:
    """A new ranker with the default parameters; give each memory service its own."""
    return Bm25Ranker()
