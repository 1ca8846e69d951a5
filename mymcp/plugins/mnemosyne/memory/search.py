"""Recall ranking: BM25F over a compact inverted index that is patched as records change
(the terms it ranks come from `analysis`)."""

from __future__ import annotations

import bisect
import heapq
import math
import sys
import threading
from array import array
from collections import OrderedDict
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from .analysis import CONTENT_MAX, LENGTH_MAX, META_MAX, DocumentTerms, query_terms

# A posting packs its record's slot above the term's packed field counts.
_SLOT_SHIFT = 32
_COUNTS = (1 << _SLOT_SHIFT) - 1

# -- BM25F ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Bm25Parameters:
    """Saturation ``k1``; per-field weight and length normalisation (title, meta, content)."""

    k1: float = 1.5
    weights: tuple[float, float, float] = (5.0, 2.0, 1.0)
    b: tuple[float, float, float] = (0.1, 0.3, 0.85)


@dataclass(frozen=True, slots=True)
class Hit:
    """One ranked document: its slot, score and the query words and tags it matched."""

    slot: int
    score: float
    matched_terms: frozenset[str]
    matched_tag_keys: frozenset[str]


# Terms held by at most this many documents are scored over all their postings; more
# common ones are visited in impact order (see `_Impact`) and stop early.
_SHORT_POSTINGS = 128
# A selection whose documents times query terms is at most this is scored in full.
_SMALL_SELECTION = 8192
# How much of an impact order is sorted when it is built; walks rarely go deeper.
_IMPACT_HEAD = 512
# Bounds the memory of impact orders: about 12 bytes per entry.
_MAX_IMPACT_ENTRIES = 2_000_000
# An impact order is rebuilt once the averages it was built under drifted this far.
_MAX_DRIFT = 1.25
# A query whose terms' postings add up to at most this is scored term at a time over
# all of them, from per-term scores kept until the scope changes (a term whose scores
# are kept counts an eighth: adding them up is that much cheaper than computing them);
# longer ones walk impact orders.
_TERM_AT_A_TIME_POSTINGS = 20_000
# Bounds the memory of the kept per-term scores.
_MAX_GAIN_ENTRIES = 1 << 19
# Relative margin when comparing a bound with a score: far above the rounding error of
# summing a query's term scores, far below any real difference.
_SLACK = 1e-9
# The query terms a recall ranks by: the rarest ones. Scoring a document costs a lookup
# per term, and a walk of impact orders lasts longer the more terms there are, so a
# query of hundreds of words would hold the index for seconds; the words left out are
# the commonest of the query, which add least to any score. (Real queries stay well
# below: the longest SciFact claim makes 31 terms, compounds included.)
MAX_QUERY_TERMS = 64


class _Norms:
    """Per-field length normalisation of one corpus state: weight / (1 - b + b * len / avg)."""

    __slots__ = ("a", "averages", "c", "w")

    def __init__(self, averages: tuple[float, ...], params: Bm25Parameters) -> None:
        self.averages = averages
        self.w = params.weights
        self.a = tuple(b / average for b, average in zip(params.b, self.averages, strict=True))
        self.c = tuple(1 - b for b in params.b)

    def of(self, packed_lengths: int) -> tuple[float, float, float]:
        (w0, w1, w2), (a0, a1, a2), (c0, c1, c2) = self.w, self.a, self.c
        return (
            w0 / (c0 + a0 * (packed_lengths >> 32)),
            w1 / (c1 + a1 * (packed_lengths >> 16 & LENGTH_MAX)),
            w2 / (c2 + a2 * (packed_lengths & LENGTH_MAX)),
        )

    @classmethod
    def of_corpus(cls, corpus: _Corpus, params: Bm25Parameters) -> _Norms:
        averages = tuple(
            total / present if present else 1.0
            for total, present in zip(corpus.totals, corpus.present, strict=True)
        )
        return cls(averages, params)

    def drift(self, now: _Norms) -> float:
        """How much larger a document's term weight can be under ``now`` than here."""
        return max(
            1.0,
            *(current / then for current, then in zip(now.averages, self.averages, strict=True)),
        )


def _term_weight(packed: int, norm: tuple[float, float, float]) -> float:
    return (
        (packed >> 22) * norm[0]
        + (packed >> 12 & META_MAX) * norm[1]
        + (packed & CONTENT_MAX) * norm[2]
    )


class _Impact:
    """The documents holding one term, best first by ``tf / (tf + k1)``.

    Only the best part is kept sorted (the *head*); the rest (the *tail*) is unsorted
    and worth strictly less than ``limit``, the value every head entry reaches, so
    sorting the tail in (`extend`) only ever appends to the head. A walk
    rarely goes past the head; when it does, the tail is sorted in (`extend`). Values
    are computed under the norms of the moment the order was built: later changes to
    the corpus averages can raise a document's value by at most the drift factor, which
    the caller folds into its bounds. Insertions and deletions keep all of it current.
    """

    __slots__ = ("limit", "negated", "norms", "slots", "tail_negated", "tail_slots")

    def __init__(
        self,
        norms: _Norms,
        negated: array[float],
        slots: array[int],
        tail_negated: array[float],
        tail_slots: array[int],
        limit: float,
    ) -> None:
        self.norms = norms
        self.negated = negated  # head: -value ascending
        self.slots = slots  # head: ascending within equal values
        self.tail_negated = tail_negated
        self.tail_slots = tail_slots
        self.limit = limit  # every tail value is below it; every head value reaches it

    def __len__(self) -> int:
        return len(self.slots) + len(self.tail_slots)

    def locate(self, value: float, slot: int) -> int:
        low = bisect.bisect_left(self.negated, -value)
        high = bisect.bisect_right(self.negated, -value, low)
        return bisect.bisect_left(self.slots, slot, low, high)

    def insert(self, value: float, slot: int) -> None:
        # A value equal to the limit goes into the head too: were it in the tail, sorting
        # the tail in could place it before head entries a walk has already passed.
        if value >= self.limit or not self.tail_slots:
            at = self.locate(value, slot)
            self.negated.insert(at, -value)
            self.slots.insert(at, slot)
        else:
            self.tail_negated.append(-value)
            self.tail_slots.append(slot)

    def delete(self, value: float, slot: int) -> None:
        at = self.locate(value, slot)
        if at < len(self.slots) and self.slots[at] == slot and self.negated[at] == -value:
            del self.negated[at]
            del self.slots[at]
            return
        where = self.tail_slots.index(slot)
        last = len(self.tail_slots) - 1
        self.tail_slots[where] = self.tail_slots[last]
        self.tail_negated[where] = self.tail_negated[last]
        del self.tail_slots[last]
        del self.tail_negated[last]

    def extend(self) -> None:
        """Sort the tail into the head: the walk went past everything sorted."""
        merged = sorted(
            zip(
                (*self.negated, *self.tail_negated),
                (*self.slots, *self.tail_slots),
                strict=True,
            )
        )
        self.negated = array("d", (value for value, _ in merged))
        self.slots = array("I", (slot for _, slot in merged))
        self.tail_negated, self.tail_slots = array("d"), array("I")
        self.limit = -math.inf


class _Corpus:
    """Postings and length statistics of the active records of one scope."""

    __slots__ = (
        "gain_entries",
        "gains",
        "impact_entries",
        "impacts",
        "norms",
        "postings",
        "present",
        "size",
        "tags",
        "totals",
    )

    def __init__(self) -> None:
        # term id -> ascending (slot << 32 | packed counts)
        self.postings: dict[int, array[int]] = {}
        self.tags: dict[int, array[int]] = {}  # tag id -> ascending slots
        self.size = 0
        self.totals = [0, 0, 0]
        # How many documents have a non-empty title / meta / content: a field's average
        # length is taken over the documents that have it.
        self.present = [0, 0, 0]
        self.impacts: OrderedDict[int, _Impact] = OrderedDict()
        self.impact_entries = 0
        # term id -> slot -> the term's score in that document; cleared on every change.
        self.gains: OrderedDict[int, dict[int, float]] = OrderedDict()
        self.gain_entries = 0
        self.norms: dict[int, tuple[float, float, float]] = {}  # slot -> length norms

    def changed(self) -> None:
        if self.gains:
            self.gains.clear()
            self.gain_entries = 0
        if self.norms:
            self.norms.clear()


class TermIndex:
    """BM25F over the active records of each scope of one root, in compact arrays.

    Documents are addressed by the index's row slots. Per document it keeps the packed
    field lengths and, for removal, the ids of its terms; per scope, every term's
    postings as one sorted array of ``slot << 32 | counts``. Memory is a few bytes per
    posting, with no Python object per document or posting.

    Scoring (all parts positive, larger is better): each query term adds
    ``idf * tf / (k1 + tf)`` with ``idf = ln(1 + (N - df + 0.5) / (df + 0.5))`` over the
    scope's active records and ``tf`` the BM25F pseudo frequency, the weighted sum of the
    term's per-field counts, each divided by ``1 - b + b * length / average length``.
    Each request tag a record carries adds more than any text score can reach, so tag
    matches rank first. Ties fall back to the scope-relative path, then the id.

    A query whose postings are few is added up term at a time over all of them, from
    per-term scores kept until the scope changes, updating only documents that can
    still reach the results once the remaining terms cannot lift any other. Otherwise
    rare terms are scored over their postings and common ones are walked in impact
    order until no unseen document can reach the results (the threshold algorithm), so
    no document holding a common word is scored for that alone. Either way the result
    is exactly what scoring every document would give.
    """

    def __init__(self, params: Bm25Parameters | None = None) -> None:
        self.params = params or Bm25Parameters()
        self._vocabulary: dict[str, int] = {}
        self._words: list[str] = []
        self._tag_vocabulary: dict[str, int] = {}
        self._tag_words: list[str] = []
        self._scopes: list[str] = []
        # Per slot: the scope's number + 1 (0: not indexed), packed field lengths
        # (title << 32 | meta << 16 | content), and start << 16 | count into the term id
        # and tag id arrays. Removed documents leave garbage that `_compact` drops.
        self._scope_codes = bytearray()
        self._lengths = array("Q")
        self._terms_at = array("Q")
        self._tags_at = array("Q")
        self._term_ids = array("I")
        self._tag_ids = array("I")
        self._count = 0
        self._garbage = 0
        self._corpora: dict[str, _Corpus] = {}
        self._lock = threading.Lock()

    def __contains__(self, slot: int) -> bool:
        return slot < len(self._scope_codes) and self._scope_codes[slot] != 0

    def __len__(self) -> int:
        return self._count

    def _tags(self, slot: int) -> array[int]:
        at = self._tags_at[slot]
        return self._tag_ids[at >> 16 : (at >> 16) + (at & 0xFFFF)]

    # -- maintenance --------------------------------------------------------------------

    def add(self, slot: int, scope: str, document: DocumentTerms) -> None:
        """Index one active record under ``slot`` (which must not be indexed yet)."""
        with self._lock:
            corpus = self._corpora.get(scope)
            if corpus is None:
                corpus = self._corpora[scope] = _Corpus()
                self._scopes.append(scope)
            vocabulary, words = self._vocabulary, self._words
            ids = array("I")
            key = slot << _SLOT_SHIFT
            lengths = document.lengths
            packed_lengths = lengths[0] << 32 | lengths[1] << 16 | lengths[2]
            for word, counts in document.counts.items():
                term = vocabulary.get(word)
                if term is None:
                    term = vocabulary[word] = len(words)
                    words.append(sys.intern(word))
                ids.append(term)
                bucket = corpus.postings.get(term)
                entry = key | counts
                if bucket is None:
                    corpus.postings[term] = array("Q", (entry,))
                elif bucket[-1] < entry:
                    bucket.append(entry)
                else:
                    bucket.insert(bisect.bisect_left(bucket, entry), entry)
                impact = corpus.impacts.get(term)
                if impact is not None:
                    value = _saturated(counts, impact.norms.of(packed_lengths), self.params.k1)
                    impact.insert(value, slot)
                    corpus.impact_entries += 1
            tag_ids = array("I")
            for tag in document.tag_keys:
                tag_id = self._tag_vocabulary.get(tag)
                if tag_id is None:
                    tag_id = self._tag_vocabulary[tag] = len(self._tag_words)
                    self._tag_words.append(sys.intern(tag))
                tag_ids.append(tag_id)
                holders = corpus.tags.get(tag_id)
                if holders is None:
                    corpus.tags[tag_id] = array("I", (slot,))
                else:
                    bisect.insort(holders, slot)
            corpus.size += 1
            corpus.changed()
            for field, length in enumerate(lengths):
                corpus.totals[field] += length
                corpus.present[field] += length > 0
            self._grow(slot)
            self._scope_codes[slot] = self._scopes.index(scope) + 1
            self._lengths[slot] = packed_lengths
            self._terms_at[slot] = len(self._term_ids) << 16 | len(ids)
            self._term_ids.extend(ids)
            self._tags_at[slot] = len(self._tag_ids) << 16 | len(tag_ids)
            self._tag_ids.extend(tag_ids)
            self._count += 1

    def remove(self, slot: int) -> None:
        """Forget the record indexed under ``slot``; nothing happens if there is none."""
        with self._lock:
            if slot not in self:
                return
            corpus = self._corpora[self._scopes[self._scope_codes[slot] - 1]]
            packed_lengths = self._lengths[slot]
            at = self._terms_at[slot]
            start, count = at >> 16, at & 0xFFFF
            key = slot << _SLOT_SHIFT
            for term in self._term_ids[start : start + count]:
                bucket = corpus.postings[term]
                index = bisect.bisect_left(bucket, key)
                counts = bucket[index] & _COUNTS
                del bucket[index]
                if not bucket:
                    del corpus.postings[term]
                    if not any(term in other.postings for other in self._corpora.values()):
                        self._drop_word(term)
                impact = corpus.impacts.get(term)
                if impact is not None:
                    value = _saturated(counts, impact.norms.of(packed_lengths), self.params.k1)
                    impact.delete(value, slot)
                    corpus.impact_entries -= 1
                    if not len(impact):
                        del corpus.impacts[term]
            for tag_id in self._tags(slot):
                holders = corpus.tags[tag_id]
                del holders[bisect.bisect_left(holders, slot)]
                if not holders:
                    del corpus.tags[tag_id]
                    if not any(tag_id in other.tags for other in self._corpora.values()):
                        self._drop_tag(tag_id)
            corpus.size -= 1
            corpus.changed()
            lengths = (
                packed_lengths >> 32,
                packed_lengths >> 16 & LENGTH_MAX,
                packed_lengths & LENGTH_MAX,
            )
            for field, length in enumerate(lengths):
                corpus.totals[field] -= length
                corpus.present[field] -= length > 0
            self._garbage += count + (self._tags_at[slot] & 0xFFFF)
            self._scope_codes[slot] = 0
            self._terms_at[slot] = 0
            self._tags_at[slot] = 0
            self._count -= 1
            if self._garbage > max(len(self._term_ids) // 2, 1 << 16):
                self._compact()

    def _drop_word(self, term: int) -> None:
        # No document holds the word any more: its text leaves the vocabulary (and so
        # every later snapshot); the number stays unused, a new use gets a new one.
        del self._vocabulary[self._words[term]]
        self._words[term] = ""

    def _drop_tag(self, tag_id: int) -> None:
        del self._tag_vocabulary[self._tag_words[tag_id]]
        self._tag_words[tag_id] = ""

    # -- persistence --------------------------------------------------------------------

    def export(self) -> dict[str, Any]:
        """Everything needed to rebuild this index, as arrays, strings and numbers."""
        with self._lock:
            self._compact()
            corpora = {}
            for scope, corpus in self._corpora.items():
                terms = array("I", sorted(corpus.postings))
                tags = array("I", sorted(corpus.tags))
                postings, holders = array("Q"), array("I")
                for term in terms:
                    postings.extend(corpus.postings[term])
                for tag in tags:
                    holders.extend(corpus.tags[tag])
                impacts = list(corpus.impacts.items())
                values, holding, sizes = array("d"), array("I"), array("I")
                for _, impact in impacts:
                    values.extend(impact.negated)
                    values.extend(impact.tail_negated)
                    holding.extend(impact.slots)
                    holding.extend(impact.tail_slots)
                    sizes.extend((len(impact.slots), len(impact.tail_slots)))
                corpora[scope] = {
                    "impact_terms": array("I", (term for term, _ in impacts)),
                    "impact_averages": [list(impact.norms.averages) for _, impact in impacts],
                    "impact_limits": [impact.limit for _, impact in impacts],
                    "impact_sizes": sizes,
                    "impact_values": values,
                    "impact_slots": holding,
                    "size": corpus.size,
                    "totals": list(corpus.totals),
                    "present": list(corpus.present),
                    "terms": terms,
                    "sizes": array("I", (len(corpus.postings[term]) for term in terms)),
                    "postings": postings,
                    "tags": tags,
                    "tag_sizes": array("I", (len(corpus.tags[tag]) for tag in tags)),
                    "tag_slots": holders,
                }
            return {
                "words": list(self._words),
                "tag_words": list(self._tag_words),
                "scopes": list(self._scopes),
                "count": self._count,
                "scope_codes": bytes(self._scope_codes),
                "lengths": array("Q", self._lengths),
                "terms_at": array("Q", self._terms_at),
                "tags_at": array("Q", self._tags_at),
                "term_ids": array("I", self._term_ids),
                "tag_ids": array("I", self._tag_ids),
                "corpora": corpora,
            }

    @classmethod
    def restore(cls, data: dict[str, Any], params: Bm25Parameters | None = None) -> TermIndex:
        """An index equal to the one `export` described.

        Raises ValueError when the parts do not fit together (ids out of range, sizes
        that do not add up), so a damaged description is never used.
        """
        _check_parts(data)
        index = cls(params)
        index._words = [sys.intern(word) for word in data["words"]]
        index._vocabulary = {word: term for term, word in enumerate(index._words) if word}
        index._tag_words = [sys.intern(tag) for tag in data["tag_words"]]
        index._tag_vocabulary = {tag: number for number, tag in enumerate(index._tag_words) if tag}
        index._scopes = list(data["scopes"])
        index._count = data["count"]
        index._scope_codes = bytearray(data["scope_codes"])
        for name in ("lengths", "terms_at", "tags_at", "term_ids", "tag_ids"):
            setattr(index, f"_{name}", array(data[name].typecode, data[name]))
        for scope, part in data["corpora"].items():
            corpus = index._corpora[scope] = _Corpus()
            corpus.size = part["size"]
            corpus.totals = list(part["totals"])
            corpus.present = list(part["present"])
            postings: array[int] = part["postings"]
            at = 0
            for term, size in zip(part["terms"], part["sizes"], strict=True):
                corpus.postings[term] = postings[at : at + size]
                at += size
            holders: array[int] = part["tag_slots"]
            at = 0
            for tag, size in zip(part["tags"], part["tag_sizes"], strict=True):
                corpus.tags[tag] = holders[at : at + size]
                at += size
            values, slots, sizes = part["impact_values"], part["impact_slots"], part["impact_sizes"]
            at = 0
            for number, term in enumerate(part["impact_terms"]):
                head, tail = sizes[2 * number], sizes[2 * number + 1]
                norms = _Norms(tuple(part["impact_averages"][number]), index.params)
                corpus.impacts[term] = _Impact(
                    norms,
                    values[at : at + head],
                    slots[at : at + head],
                    values[at + head : at + head + tail],
                    slots[at + head : at + head + tail],
                    part["impact_limits"][number],
                )
                corpus.impact_entries += head + tail
                if len(corpus.impacts[term]) != len(corpus.postings.get(term, ())):
                    raise ValueError("impact sizes")
                at += head + tail
            if at != len(values) or len(values) != len(slots):
                raise ValueError("impact values")
            if slots and max(slots) >= len(index._scope_codes):
                raise ValueError("impact slots")
        return index

    def _grow(self, slot: int) -> None:
        missing = slot + 1 - len(self._lengths)
        if missing > 0:
            grow = max(missing, len(self._lengths) // 2, 64)
            self._scope_codes.extend(bytes(grow))
            for column in (self._lengths, self._terms_at, self._tags_at):
                column.extend(array("Q", bytes(8 * grow)))

    def _compact(self) -> None:
        """Drop the term and tag ids of removed documents (they are only garbage)."""
        if not self._garbage:
            return
        terms, tags = array("I"), array("I")
        for slot, code in enumerate(self._scope_codes):
            if code:
                for column, ids, source in (
                    (self._terms_at, terms, self._term_ids),
                    (self._tags_at, tags, self._tag_ids),
                ):
                    at = column[slot]
                    start, count = at >> 16, at & 0xFFFF
                    column[slot] = len(ids) << 16 | count
                    ids.extend(source[start : start + count])
        self._term_ids, self._tag_ids = terms, tags
        self._garbage = 0

    # -- ranking ------------------------------------------------------------------------

    def rank(
        self,
        scope: str,
        text: str,
        tag_keys: frozenset[str],
        limit: int,
        tiebreak: Callable[[int], tuple[str, str]],
        eligible: Collection[int] | None = None,
    ) -> list[Hit]:
        """The ``limit`` best active records of ``scope`` for ``text`` and request tags.

        ``eligible`` narrows the documents that may be returned (statistics still cover
        the scope); ``tiebreak`` gives a slot's (scope-relative path, id) for equal
        scores.
        """
        with self._lock:
            corpus = self._corpora.get(scope)
            if corpus is None or not corpus.size or limit <= 0:
                return []
            return _Ranking(self, corpus, text, tag_keys, limit, tiebreak, eligible).run()

    def _gains(self, corpus: _Corpus, term: int, idf: float, norms: _Norms) -> dict[int, float]:
        """``slot -> idf * tf / (tf + k1)`` for the documents holding ``term``, kept."""
        found = corpus.gains.get(term)
        if found is not None:
            corpus.gains.move_to_end(term)
            return found
        lengths, k1, cached = self._lengths, self.params.k1, corpus.norms
        known = cached.get
        shift, mask, meta_max, content_max = _SLOT_SHIFT, _COUNTS, META_MAX, CONTENT_MAX
        found = {}
        for entry in corpus.postings[term]:
            slot = entry >> shift
            norm = known(slot)
            if norm is None:
                norm = cached[slot] = norms.of(lengths[slot])
            counts = entry & mask
            if counts <= content_max:
                # Content only: the zero title and meta terms of `_term_weight` add
                # exactly nothing, so this is the same float.
                tf = counts * norm[2]
            else:  # `_term_weight`, inline: the same operations in the same order
                tf = (
                    (counts >> 22) * norm[0]
                    + (counts >> 12 & meta_max) * norm[1]
                    + (counts & content_max) * norm[2]
                )
            found[slot] = idf * tf / (tf + k1)
        corpus.gains[term] = found
        corpus.gain_entries += len(found)
        while corpus.gain_entries > _MAX_GAIN_ENTRIES and len(corpus.gains) > 1:
            _, dropped = corpus.gains.popitem(last=False)
            corpus.gain_entries -= len(dropped)
        return found

    def _impact(self, corpus: _Corpus, term: int, norms: _Norms) -> tuple[_Impact, float]:
        """The impact order of ``term`` and its drift factor under ``norms`` (built if needed)."""
        impact = corpus.impacts.get(term)
        if impact is not None:
            drift = impact.norms.drift(norms)
            if drift <= _MAX_DRIFT:
                corpus.impacts.move_to_end(term)
                return impact, drift
            corpus.impact_entries -= len(impact)
            del corpus.impacts[term]
        bucket = corpus.postings[term]
        lengths, k1 = self._lengths, self.params.k1
        # Equal counts over equal lengths score alike, and both repeat a lot.
        memo: dict[int, float] = {}
        negated = array("d")
        append = negated.append
        for entry in bucket:
            packed = lengths[entry >> _SLOT_SHIFT]
            key = (entry & _COUNTS) << 48 | packed
            value = memo.get(key)
            if value is None:
                value = memo[key] = -_saturated(entry & _COUNTS, norms.of(packed), k1)
            append(value)
        count = len(negated)
        if count <= 2 * _IMPACT_HEAD:
            head, rest = sorted(range(count), key=negated.__getitem__), []
        else:
            # nsmallest is stable: equal values keep ascending slot order.
            head = heapq.nsmallest(_IMPACT_HEAD, range(count), key=negated.__getitem__)
            # Every entry equal to the head's last value joins the head (after it: their
            # slots are higher), so each tail value is strictly below every head value.
            boundary = negated[head[-1]]
            chosen = set(head)
            head += [i for i in range(count) if negated[i] == boundary and i not in chosen]
            chosen.update(head)
            rest = [i for i in range(count) if i not in chosen]
        impact = _Impact(
            norms,
            array("d", (negated[i] for i in head)),
            array("I", (bucket[i] >> _SLOT_SHIFT for i in head)),
            array("d", (negated[i] for i in rest)),
            array("I", (bucket[i] >> _SLOT_SHIFT for i in rest)),
            -negated[head[-1]] if rest else -math.inf,
        )
        corpus.impacts[term] = impact
        corpus.impact_entries += count
        while corpus.impact_entries > _MAX_IMPACT_ENTRIES and len(corpus.impacts) > 1:
            _, dropped = corpus.impacts.popitem(last=False)
            corpus.impact_entries -= len(dropped)
        return impact, 1.0


def _check_parts(data: dict[str, Any]) -> None:
    """Structural checks of an exported index, in whole-array operations."""
    words, tag_words = data["words"], data["tag_words"]
    codes: bytes = data["scope_codes"]
    lengths, terms_at, tags_at = data["lengths"], data["terms_at"], data["tags_at"]
    term_ids, tag_ids = data["term_ids"], data["tag_ids"]
    if not len(codes) == len(lengths) == len(terms_at) == len(tags_at):
        raise ValueError("document columns")
    if codes and max(codes) > len(data["scopes"]):
        raise ValueError("scope codes")
    if data["count"] != len(codes) - codes.count(0):
        raise ValueError("document count")
    if (term_ids and max(term_ids) >= len(words)) or (tag_ids and max(tag_ids) >= len(tag_words)):
        raise ValueError("ids")
    for column, ids in ((terms_at, term_ids), (tags_at, tag_ids)):
        if any((at >> 16) + (at & 0xFFFF) > len(ids) for at in column):
            raise ValueError("id ranges")
    for part in data["corpora"].values():
        postings, terms, sizes = part["postings"], part["terms"], part["sizes"]
        if len(terms) != len(sizes) or sum(sizes) != len(postings):
            raise ValueError("postings sizes")
        if terms and max(terms) >= len(words):
            raise ValueError("postings terms")
        if postings and max(postings) >> _SLOT_SHIFT >= len(codes):
            raise ValueError("postings slots")
        tags, tag_sizes, holders = part["tags"], part["tag_sizes"], part["tag_slots"]
        if len(tags) != len(tag_sizes) or sum(tag_sizes) != len(holders):
            raise ValueError("tag sizes")
        if (tags and max(tags) >= len(tag_words)) or (holders and max(holders) >= len(codes)):
            raise ValueError("tag ids")


def _saturated(counts: int, norm: tuple[float, float, float], k1: float) -> float:
    weight = _term_weight(counts, norm)
    return weight / (weight + k1)


def _inflated(value: float, drift: float) -> float:
    """An upper bound of ``tf / (tf + k1)`` after the term weight grew by ``drift``."""
    if drift == 1.0 or value >= 1.0:
        return value
    grown = drift * value / (1.0 - value)  # tf / k1, scaled
    return grown / (grown + 1.0)


class _Ranking:
    """One call of `TermIndex.rank`, holding its query state."""

    def __init__(
        self,
        index: TermIndex,
        corpus: _Corpus,
        text: str,
        tag_keys: frozenset[str],
        limit: int,
        tiebreak: Callable[[int], tuple[str, str]],
        eligible: Collection[int] | None,
    ) -> None:
        self.index = index
        self.corpus = corpus
        self.limit = limit
        self.tiebreak = tiebreak
        self.eligible = eligible
        self.surfaces: dict[str, list[str]] = {}
        for surface, word in query_terms(text):
            self.surfaces.setdefault(word, []).append(surface)
        count = corpus.size
        terms: list[tuple[float, str, int, array[int]]] = []
        for word in self.surfaces:
            term = index._vocabulary.get(word)
            bucket = None if term is None else corpus.postings.get(term)
            if term is not None and bucket:
                df = len(bucket)
                terms.append((math.log(1 + (count - df + 0.5) / (df + 0.5)), word, term, bucket))
        # Rarest first; the word breaks IDF ties so the float sums are reproducible.
        terms.sort(key=lambda item: (-item[0], item[1]))
        self.terms = terms[:MAX_QUERY_TERMS]
        terms = self.terms
        self.ceiling = sum(idf for idf, _, _, _ in terms) + 1.0
        # Request tags no document carries can match nothing and are left out.
        known = index._tag_vocabulary
        self.tags = sorted(known[tag] for tag in tag_keys if tag in known)
        self.norms = _Norms.of_corpus(corpus, index.params)
        self._norm_cache: dict[int, tuple[float, float, float]] = {}
        self.scores: dict[int, float] = {}
        self.best: list[float] = []  # min-heap of the ``limit`` best scores
        self.ruled_out: set[int] = set()

    def norm(self, slot: int) -> tuple[float, float, float]:
        found = self._norm_cache.get(slot)
        if found is None:
            found = self._norm_cache[slot] = self.norms.of(self.index._lengths[slot])
        return found

    def score(self, slot: int) -> float:
        """The exact score of one document, always summed in the same order."""
        total = 0.0
        if self.tags:
            held = self.index._tags(slot)
            for tag in self.tags:
                if tag in held:
                    total += self.ceiling
        norm = self.norm(slot)
        k1 = self.index.params.k1
        key = slot << _SLOT_SHIFT
        for idf, _, _, bucket in self.terms:
            at = bisect.bisect_left(bucket, key)
            if at < len(bucket):
                entry = bucket[at]
                if entry >> _SLOT_SHIFT == slot:
                    tf = _term_weight(entry & _COUNTS, norm)
                    total += idf * tf / (tf + k1)
        return total

    def consider(self, slot: int) -> None:
        if slot in self.scores or slot in self.ruled_out:
            return
        if self.eligible is not None and slot not in self.eligible:
            self.ruled_out.add(slot)
            return
        value = self.score(slot)
        if value <= 0.0:  # nothing of the query in it: not a match at all
            self.ruled_out.add(slot)
            return
        self.scores[slot] = value
        if len(self.best) < self.limit:
            heapq.heappush(self.best, value)
        elif value > self.best[0]:
            heapq.heapreplace(self.best, value)

    def beaten(self, bound: float) -> bool:
        """Whether no document scoring at most ``bound`` can enter (or tie) the results."""
        if len(self.best) < self.limit:
            return False
        threshold = self.best[0]
        return bound < threshold - _SLACK * (1.0 + abs(threshold))

    def run(self) -> list[Hit]:
        corpus = self.corpus
        eligible = self.eligible
        if eligible is not None and len(eligible) * max(1, len(self.terms)) <= _SMALL_SELECTION:
            # A small selection is cheaper to score in full than to find in the postings.
            for slot in sorted(eligible):
                if slot in self.index:
                    self.consider(slot)
            return self._ranked()
        kept = corpus.gains
        work = sum(
            len(bucket) // 8 if term in kept else len(bucket) for _, _, term, bucket in self.terms
        )
        if work <= _TERM_AT_A_TIME_POSTINGS:
            self._term_at_a_time()
            return self._ranked()
        for tag in self.tags:
            for slot in corpus.tags.get(tag, ()):
                self.consider(slot)
        short = [item for item in self.terms if len(item[3]) <= _SHORT_POSTINGS]
        common = [item for item in self.terms if len(item[3]) > _SHORT_POSTINGS]
        self._rare_terms(short, sum(idf for idf, _, _, _ in common))
        if common:
            self._common_terms(common)
        return self._ranked()

    def _ranked(self) -> list[Hit]:
        limit = self.limit
        if not self.best:
            return []
        threshold = self.best[0]
        ranked = sorted(
            (slot for slot, value in self.scores.items() if value >= threshold),
            key=lambda slot: (-self.scores[slot], *self.tiebreak(slot)),
        )[:limit]
        return [self._hit(slot) for slot in ranked]

    def _term_at_a_time(self) -> None:
        """Add up every term's kept scores over all its documents, in the query's term
        order (so every sum is the one `score` makes). Once the terms left cannot lift a
        document without a score to the results, only documents that still could are
        updated."""
        corpus, limit, eligible = self.corpus, self.limit, self.eligible
        scores: dict[int, float] = {}
        for tag in self.tags:
            for slot in corpus.tags.get(tag, ()):
                scores[slot] = scores.get(slot, 0.0) + self.ceiling
        remaining = self.ceiling - 1.0  # a term adds less than its IDF
        pruning = False
        for idf, _, term, _ in self.terms:
            gains = self.index._gains(corpus, term, idf, self.norms)
            # The best scores so far stand for the results only when any document may be
            # returned; a narrowed selection is summed in full.
            if (
                eligible is None
                and len(scores) >= limit
                and (pruning or remaining < max(scores.values()))
            ):
                threshold = heapq.nlargest(limit, scores.values())[-1]
                margin = _SLACK * (1.0 + threshold)
                if remaining < threshold - margin:
                    pruning = True
                    floor = threshold - remaining - margin
                    if min(scores.values()) < floor:
                        scores = {s: value for s, value in scores.items() if value >= floor}
            if pruning:
                if len(gains) < len(scores):
                    for slot, gain in gains.items():
                        held = scores.get(slot)
                        if held is not None:
                            scores[slot] = held + gain
                else:
                    for slot, value in scores.items():
                        found = gains.get(slot)
                        if found is not None:
                            scores[slot] = value + found
            elif scores:
                merged = dict(gains)
                for slot in gains.keys() & scores.keys():
                    merged[slot] = scores[slot] + gains[slot]
                scores.update(merged)
            else:
                scores = dict(gains)
            remaining -= idf
        if eligible is not None:
            scores = {slot: value for slot, value in scores.items() if slot in eligible}
        self.scores = scores
        self.best = heapq.nlargest(limit, scores.values())
        heapq.heapify(self.best)

    def _rare_terms(self, short: list[tuple[float, str, int, array[int]]], common: float) -> None:
        """Score every document holding a rare term, best partial scores first."""
        partial: dict[int, float] = {}
        k1 = self.index.params.k1
        for idf, _, _, bucket in short:
            for entry in bucket:
                slot = entry >> _SLOT_SHIFT
                tf = _term_weight(entry & _COUNTS, self.norm(slot))
                partial[slot] = partial.get(slot, 0.0) + idf * tf / (tf + k1)
        for slot in sorted(partial, key=partial.__getitem__, reverse=True):
            if self.beaten(partial[slot] + common):
                # Every later document scores at most this: none can enter any more.
                self.ruled_out.update(s for s in partial if s not in self.scores)
                return
            self.consider(slot)

    def _common_terms(self, common: list[tuple[float, str, int, array[int]]]) -> None:
        """Walk the common terms' impact orders until no unseen document can compete.

        A document not considered yet adds at most ``caps[i]`` from term ``i``: the value
        at the walk's position in the term's impact order (inflated by the drift of its
        norms), or the term's IDF while that order is not built. The walk always advances
        the term with the largest cap, so terms that cannot lift anything (the commonest
        words) are never walked and their orders never built; it stops once the sum of
        the caps cannot reach the results.
        """
        idfs = [idf for idf, _, _, _ in common]
        walks: list[tuple[_Impact, float] | None] = [None] * len(common)
        positions = [0] * len(common)
        caps = list(idfs)
        # The largest cap (the first term among equal ones) from a heap whose outdated
        # entries are dropped as they surface, and the caps' sum kept as they change:
        # rescanning every cap at every step made a long query's walk quadratic. The
        # kept sum drifts by rounding, so the walk only stops once the exact sum agrees.
        largest = [(-cap, term) for term, cap in enumerate(caps)]
        heapq.heapify(largest)
        bound = sum(caps)
        while not (self.beaten(bound) and self.beaten(bound := sum(caps))):
            while -largest[0][0] != caps[largest[0][1]]:
                heapq.heappop(largest)
            best = largest[0][1]
            if caps[best] <= 0.0:
                return  # every order walked to its end
            walk = walks[best]
            if walk is None:
                walk = walks[best] = self.index._impact(self.corpus, common[best][2], self.norms)
            else:
                self.consider(walk[0].slots[positions[best]])
                positions[best] += 1
            impact, drift = walk
            at = positions[best]
            if at >= len(impact.slots) and impact.tail_slots:
                impact.extend()
            cap = 0.0
            if at < len(impact.slots):
                cap = idfs[best] * _inflated(-impact.negated[at], drift)
            if cap != caps[best]:
                bound += cap - caps[best]
                caps[best] = cap
                heapq.heappush(largest, (-cap, best))

    def _hit(self, slot: int) -> Hit:
        key = slot << _SLOT_SHIFT
        matched: set[str] = set()
        for _, word, _, bucket in self.terms:
            at = bisect.bisect_left(bucket, key)
            if at < len(bucket) and bucket[at] >> _SLOT_SHIFT == slot:
                matched.update(self.surfaces[word])
        held = self.index._tags(slot)
        words = self.index._tag_words
        return Hit(
            slot,
            self.scores[slot],
            frozenset(matched),
            frozenset(words[tag] for tag in self.tags if tag in held),
        )
