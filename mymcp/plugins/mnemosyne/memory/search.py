"""Recall ranking: text analysis (words, compounds, Porter stemming) and BM25F over an
incrementally maintained inverted index.
"""

from __future__ import annotations

import heapq
import math
import re
import threading
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from itertools import chain

from .model import MemoryRecord, tag_key

# -- Porter stemming ------------------------------------------------------------------------

_VOWELS = frozenset("aeiou")


class _Word:
    """Working state of one stemming run: the buffer ``b`` and its end ``k`` / mark ``j``."""

    __slots__ = ("b", "j", "k")

    def __init__(self, word: str) -> None:
        self.b = word
        self.k = len(word) - 1
        self.j = 0

    def cons(self, i: int) -> bool:
        ch = self.b[i]
        if ch in _VOWELS:
            return False
        if ch == "y":
            return i == 0 or not self.cons(i - 1)
        return True

    def m(self) -> int:
        """The number of vowel-consonant sequences in b[0..j]."""
        n = 0
        i = 0
        j = self.j
        while True:
            if i > j:
                return n
            if not self.cons(i):
                break
            i += 1
        i += 1
        while True:
            while True:
                if i > j:
                    return n
                if self.cons(i):
                    break
                i += 1
            i += 1
            n += 1
            while True:
                if i > j:
                    return n
                if not self.cons(i):
                    break
                i += 1
            i += 1

    def vowel_in_stem(self) -> bool:
        return any(not self.cons(i) for i in range(self.j + 1))

    def double_c(self, j: int) -> bool:
        return j >= 1 and self.b[j] == self.b[j - 1] and self.cons(j)

    def cvc(self, i: int) -> bool:
        if i < 2 or not self.cons(i) or self.cons(i - 1) or not self.cons(i - 2):
            return False
        return self.b[i] not in "wxy"

    def ends(self, suffix: str) -> bool:
        length = len(suffix)
        if length > self.k + 1 or self.b[self.k - length + 1 : self.k + 1] != suffix:
            return False
        self.j = self.k - length
        return True

    def set_to(self, text: str) -> None:
        self.b = self.b[: self.j + 1] + text
        self.k = self.j + len(text)

    def r(self, text: str) -> None:
        if self.m() > 0:
            self.set_to(text)

    def step1ab(self) -> None:
        if self.b[self.k] == "s":
            if self.ends("sses"):
                self.k -= 2
            elif self.ends("ies"):
                self.set_to("i")
            elif self.b[self.k - 1] != "s":
                self.k -= 1
        self.b = self.b[: self.k + 1]
        if self.ends("eed"):
            if self.m() > 0:
                self.k -= 1
        elif (self.ends("ed") or self.ends("ing")) and self.vowel_in_stem():
            self.k = self.j
            self.b = self.b[: self.k + 1]
            if self.ends("at"):
                self.set_to("ate")
            elif self.ends("bl"):
                self.set_to("ble")
            elif self.ends("iz"):
                self.set_to("ize")
            elif self.double_c(self.k):
                if self.b[self.k] not in "lsz":
                    self.k -= 1
            elif self.m() == 1 and self.cvc(self.k):
                self.j = self.k
                self.set_to("e")
        self.b = self.b[: self.k + 1]

    def step1c(self) -> None:
        if self.ends("y") and self.vowel_in_stem():
            self.b = self.b[: self.k] + "i"

    def step2(self) -> None:
        for suffix, replacement in _STEP2.get(self.b[self.k - 1] if self.k else "", ()):
            if self.ends(suffix):
                self.r(replacement)
                return

    def step3(self) -> None:
        for suffix, replacement in _STEP3.get(self.b[self.k], ()):
            if self.ends(suffix):
                self.r(replacement)
                return

    def step4(self) -> None:
        for suffix in _STEP4.get(self.b[self.k - 1] if self.k else "", ()):
            if self.ends(suffix):
                if suffix == "ion" and not (self.j >= 0 and self.b[self.j] in "st"):
                    return
                break
        else:
            return
        if self.m() > 1:
            self.k = self.j
            self.b = self.b[: self.k + 1]

    def step5(self) -> None:
        self.j = self.k
        if self.b[self.k] == "e":
            a = self.m()
            if a > 1 or (a == 1 and not self.cvc(self.k - 1)):
                self.k -= 1
        if self.b[self.k] == "l" and self.double_c(self.k) and self.m() > 1:
            self.k -= 1
        self.b = self.b[: self.k + 1]


_STEP2: dict[str, tuple[tuple[str, str], ...]] = {
    "a": (("ational", "ate"), ("tional", "tion")),
    "c": (("enci", "ence"), ("anci", "ance")),
    "e": (("izer", "ize"),),
    "l": (("bli", "ble"), ("alli", "al"), ("entli", "ent"), ("eli", "e"), ("ousli", "ous")),
    "o": (("ization", "ize"), ("ation", "ate"), ("ator", "ate")),
    "s": (("alism", "al"), ("iveness", "ive"), ("fulness", "ful"), ("ousness", "ous")),
    "t": (("aliti", "al"), ("iviti", "ive"), ("biliti", "ble")),
    "g": (("logi", "log"),),
}
_STEP3: dict[str, tuple[tuple[str, str], ...]] = {
    "e": (("icate", "ic"), ("ative", ""), ("alize", "al")),
    "i": (("iciti", "ic"),),
    "l": (("ical", "ic"), ("ful", "")),
    "s": (("ness", ""),),
}
_STEP4: dict[str, tuple[str, ...]] = {
    "a": ("al",),
    "c": ("ance", "ence"),
    "e": ("er",),
    "i": ("ic",),
    "l": ("able", "ible"),
    "n": ("ant", "ement", "ment", "ent"),
    "o": ("ion", "ou"),
    "s": ("ism",),
    "t": ("ate", "iti"),
    "u": ("ous",),
    "v": ("ive",),
    "z": ("ize",),
}


def porter_stem(word: str) -> str:
    """The Porter stem of a lowercase ASCII word; words of 1-2 letters are left alone."""
    if len(word) <= 2:
        return word
    state = _Word(word)
    state.step1ab()
    if state.k > 0:
        state.step1c()
        state.step2()
        state.step3()
        state.step4()
        state.step5()
    return state.b[: state.k + 1]


# -- text analysis --------------------------------------------------------------------------


def _mark_class() -> str:
    """A regex class body of the combining marks (Mn, Mc, Me) in planes 0 and 1.

    Python's ``\\w`` leaves them out, which would cut Devanagari, Thai or decomposed
    Latin words apart at every vowel sign or accent.
    """
    ranges: list[str] = []
    start = previous = -2
    for code in range(0x20000):
        if unicodedata.category(chr(code)) in ("Mn", "Mc", "Me"):
            if code != previous + 1:
                if start >= 0:
                    ranges.append(_span(start, previous))
                start = code
            previous = code
    ranges.append(_span(start, previous))
    return "".join(ranges)


def _span(first: int, last: int) -> str:
    return f"\\U{first:08x}" if first == last else f"\\U{first:08x}-\\U{last:08x}"


@dataclass(frozen=True, slots=True)
class _WordPatterns:
    run: re.Pattern[str]
    word: re.Pattern[str]
    letters_or_digits: re.Pattern[str]


@cache
def word_patterns() -> _WordPatterns:
    """Compile the word patterns once, on first use (never at import: it takes ~0.2 s).

    `Bm25Ranker` asks for them when it is built, so the cost falls on server startup
    rather than on the first recall.
    """
    marks = _mark_class()
    # A word: letters and digits (never the underscore) with any combining marks they carry.
    word = rf"(?:[^\W_]|[{marks}])+"
    return _WordPatterns(
        # A run of words, each joined to the next by one connector.
        run=re.compile(rf"{word}(?:[-._:]{word})*"),
        word=re.compile(word),
        letters_or_digits=re.compile(rf"\d+|(?:[^\W\d_]|[{marks}])+"),
    )


_DIGIT = re.compile(r"\d")
_LETTER_DIGIT_CONNECTOR = re.compile(r"(?<=\d)[-._:](?=[^\W\d_])|(?<=[^\W\d_])[-._:](?=\d)")
_CJK = re.compile(r"([\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]+)")
# Longer compounds are almost always URLs or hashes; their parts still count.
_COMPOUND_MAX = 64
# Words up to this length have their analysis memoised (queries and records repeat them).
_CACHED_WORD_MAX = 40


@lru_cache(maxsize=65_536)
def _normalize_word(word: str) -> str:
    """The index term of one casefolded word of letters and/or digits (no CJK inside)."""
    if word.isascii():
        return porter_stem(word) if word.isalpha() else word
    decomposed = unicodedata.normalize("NFKD", word)
    folded = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    if folded.isascii() and folded.isalnum():
        return porter_stem(folded) if folded.isalpha() else folded
    return word


def _fold_compound(compound: str) -> str:
    # A connector between letters and digits is dropped ("adr-12" -> "adr12"), so the
    # compound meets the same identifier written without it; others stay ("3.11.2").
    compound = _LETTER_DIGIT_CONNECTOR.sub("", compound)
    if compound.isascii():
        return compound
    decomposed = unicodedata.normalize("NFKD", compound)
    folded = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    return folded if folded.isascii() else compound


def _cjk_terms(run: str) -> list[str]:
    if len(run) == 1:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)]


def _plain_pairs(word: str) -> list[tuple[str, str]]:
    """(surface, term) pairs of a word without CJK: itself, plus its letter/digit runs."""
    pairs = [(word, _normalize_word(word))]
    if not word.isdigit() and _DIGIT.search(word):
        # "il6", "adr12", "v2": the letter and digit runs count too, so they meet
        # "IL-6", "ADR 12" and "version 2".
        runs = word_patterns().letters_or_digits.findall(word)
        if len(runs) > 1:
            pairs.extend((run, _normalize_word(run)) for run in runs)
    return pairs


def _word_pairs(word: str) -> tuple[tuple[str, str], ...]:
    """(surface, term) pairs of one word, splitting out CJK segments; short words cached."""
    if len(word) <= _CACHED_WORD_MAX:
        return _cached_word_pairs(word)
    return tuple(_analyze_word(word))


@lru_cache(maxsize=65_536)
def _cached_word_pairs(word: str) -> tuple[tuple[str, str], ...]:
    return tuple(_analyze_word(word))


def _analyze_word(word: str) -> list[tuple[str, str]]:
    if not _CJK.search(word):
        return _plain_pairs(word)
    pairs: list[tuple[str, str]] = []
    for index, piece in enumerate(_CJK.split(word)):
        if not piece:
            continue
        if index % 2:  # the capturing split puts CJK runs at odd positions
            pairs.extend((gram, gram) for gram in _cjk_terms(piece))
        else:
            pairs.extend(_plain_pairs(piece))
    return pairs


# On ASCII text the word patterns reduce to these (no marks, no uppercase after casefold,
# ``[^\W_]`` is ``[a-z0-9]``); the Unicode classes cost several times more per character.
_ASCII_RUN = re.compile(r"[a-z0-9]+(?:[-._:][a-z0-9]+)*")
_ASCII_WORD = re.compile(r"[a-z0-9]+")
_ASCII_CONNECTED = re.compile(r"[a-z0-9][-._:][a-z0-9]")


def query_terms(text: str) -> list[tuple[str, str]]:
    """(surface, term) pairs in text order; the surface is the casefolded word as written."""
    folded = text.casefold()
    if folded.isascii():
        return _ascii_query_terms(folded)
    return _unicode_query_terms(folded)


def _unicode_query_terms(folded: str) -> list[tuple[str, str]]:
    """``query_terms`` of any casefolded text (the general path)."""
    pairs: list[tuple[str, str]] = []
    patterns = word_patterns()
    for match in patterns.run.finditer(folded):
        run = match.group()
        words = patterns.word.findall(run)
        for word in words:
            pairs.extend(_word_pairs(word))
        if len(words) > 1 and len(run) <= _COMPOUND_MAX:
            pairs.append((run, _fold_compound(run)))
    return pairs


def _ascii_query_terms(folded: str) -> list[tuple[str, str]]:
    """``query_terms`` of casefolded ASCII text, with the same result."""
    pairs: list[tuple[str, str]] = []
    for run in _ASCII_RUN.findall(folded):
        if run.isalnum():  # a single word, no connector: no compound either
            pairs.extend(_word_pairs(run))
            continue
        words = _ASCII_WORD.findall(run)
        for word in words:
            pairs.extend(_word_pairs(word))
        if len(run) <= _COMPOUND_MAX:  # a connector always joins two or more words
            pairs.append((run, _fold_compound(run)))
    return pairs


@lru_cache(maxsize=65_536)
def _ascii_word_terms(word: str) -> tuple[str, ...]:
    return tuple(term for _, term in _analyze_word(word))


def analyze(text: str) -> list[str]:
    """Index terms of ``text`` in order, with repeats (term frequency counts)."""
    folded = text.casefold()
    if not folded.isascii():
        return [term for _, term in _unicode_query_terms(folded)]
    if _ASCII_CONNECTED.search(folded) is None:
        # Every run is one word: the whole analysis runs in C over memoised words.
        return list(chain.from_iterable(map(_ascii_word_terms, _ASCII_WORD.findall(folded))))
    terms: list[str] = []
    extend = terms.extend
    for run in _ASCII_RUN.findall(folded):
        if run.isalnum():
            extend(_ascii_word_terms(run))
            continue
        extend(chain.from_iterable(map(_ascii_word_terms, _ASCII_WORD.findall(run))))
        if len(run) <= _COMPOUND_MAX:
            terms.append(_fold_compound(run))
    return terms


# -- record terms ---------------------------------------------------------------------------


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
    """What ranking needs to know about one record, extracted once per file version."""

    tag_keys: frozenset[str]
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
    """Count the terms of a record's title, location and tags, and content."""
    tags = record.all_tags
    return RecordTerms(
        tag_keys=frozenset(tag_key(tag) for tag in tags),
        fields=field_terms(record.title, [scope_relative_path, *tags], record.content),
    )


# -- ranking ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RecallQuery:
    """The query side of ranking: the normalised query text and casefolded request tags."""

    text: str
    tag_keys: frozenset[str]


@dataclass(frozen=True, slots=True)
class RankedHit:
    """One kept candidate: its position in the input, score and match evidence."""

    position: int
    score: float
    matched_terms: frozenset[str]
    matched_tag_keys: frozenset[str]


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
    return query_terms(query.text)


def default_ranker() -> Bm25Ranker:
    """A new ranker with the default parameters; give each memory service its own."""
    return Bm25Ranker()
