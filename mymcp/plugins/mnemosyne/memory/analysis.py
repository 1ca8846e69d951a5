"""Text analysis for recall: words, compounds, Porter stemming, and the packed per-field
term counts of one record that ranking reads."""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from itertools import chain
from typing import Final

from .model import tag_key

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

    `MemoryService` asks for them when it is built, so the cost falls on server startup
    rather than on the first call.
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


# English function words, as `query_terms` gives their surface: words that say nothing of
# what a memory is about. A memory that shares only these with a query is no match for
# it ("What is the name of my dog?" against "The capital of France is Paris"). They still
# count in ranking, where they weigh little next to the words that do matter.
FUNCTION_WORDS: Final = frozenset(
    """a about above after again against all am an and any are as at be because been
    before being below between both but by can could did do does doing down during each
    few for from further had has have having he her here hers herself him himself his how
    i if in into is it its itself just me more most my myself no nor not now of off on
    once only or other our ours ourselves out over own same she should so some such than
    that the their theirs them themselves then there these they this those through to too
    under until up very was we were what when where which while who whom why will with
    would you your yours yourself yourselves""".split()  # noqa: SIM905
)


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


# Every ASCII character that is neither a letter, a digit nor a connector: a separator.
_SEPARATORS = str.maketrans(
    {chr(code): " " for code in range(128) if not chr(code).isalnum() and chr(code) not in "-._:"}
)


def analyze(text: str) -> list[str]:
    """Index terms of ``text`` in order, with repeats (term frequency counts)."""
    folded = text.casefold()
    if not folded.isascii():
        return [term for _, term in _unicode_query_terms(folded)]
    # Runs never cross a separator, so split on separators in C first; only tokens that
    # still hold a connector need the run pattern.
    terms: list[str] = []
    extend = terms.extend
    for token in folded.translate(_SEPARATORS).split():
        if token.isalnum():
            extend(_ascii_word_terms(token))
            continue
        for run in _ASCII_RUN.findall(token):
            if run.isalnum():
                extend(_ascii_word_terms(run))
                continue
            extend(chain.from_iterable(map(_ascii_word_terms, _ASCII_WORD.findall(run))))
            if len(run) <= _COMPOUND_MAX:
                terms.append(_fold_compound(run))
    return terms


# -- document terms -------------------------------------------------------------------------

# Names the analysis rules: any change to what a text yields (words, stems, compounds,
# what counts as meta) must bump it, so that saved postings of older rules are not used.
ANALYSIS_VERSION: Final = 1

# A term's per-field counts, packed into one integer: title (8 bits), meta (10), content
# (12). Field limits keep real counts far below these bounds (a title has at most 200
# characters, content 4000); larger counts saturate, which BM25's saturation makes moot.
TITLE_MAX, META_MAX, CONTENT_MAX = 0xFF, 0x3FF, 0xFFF
LENGTH_MAX = 0xFFFF


@dataclass(frozen=True, slots=True)
class DocumentTerms:
    """The ranking view of one record: packed counts per term, field lengths and tags.

    Fields are title, meta (the scope-relative path plus the record's tags) and
    content; ``lengths`` are the three field lengths in terms.
    """

    counts: dict[str, int]
    lengths: tuple[int, int, int]
    tag_keys: tuple[str, ...]


def term_counts(text: str) -> tuple[dict[str, int], int]:
    """``Counter(analyze(text))`` and ``len(analyze(text))``, computed faster.

    Equal tokens analyse alike, so ASCII text is counted token by token in C first and
    each distinct token is analysed once.
    """
    folded = text.casefold()
    if not folded.isascii():
        terms = analyze(text)
        return dict(Counter(terms)), len(terms)
    counts: dict[str, int] = {}
    total = 0
    get = counts.get
    for token, times in Counter(folded.translate(_SEPARATORS).split()).items():
        core = token.strip("-._:")
        if core.isalnum():
            produced: Sequence[str] = _ascii_word_terms(core)
        elif not core:
            continue
        else:
            produced = analyze(core)
        for term in produced:
            counts[term] = get(term, 0) + times
        total += times * len(produced)
    return counts, total


def document_terms(
    title: str | None, path: str, tags: tuple[str, ...], content: str
) -> DocumentTerms:
    """Analyse one record for ranking (see the text analysis rules above)."""
    content_counts, content_length = term_counts(content)
    counts = {term: min(count, CONTENT_MAX) for term, count in content_counts.items()}
    meta_counts: dict[str, int] = {}
    meta_length = 0
    for text in (path, *tags):
        found, length = term_counts(text)
        meta_length += length
        for term, count in found.items():
            meta_counts[term] = meta_counts.get(term, 0) + count
    for term, count in meta_counts.items():
        counts[term] = counts.get(term, 0) | min(count, META_MAX) << 12
    title_length = 0
    if title:
        title_counts, title_length = term_counts(title)
        for term, count in title_counts.items():
            counts[term] = counts.get(term, 0) | min(count, TITLE_MAX) << 22
    lengths = (
        min(title_length, LENGTH_MAX),
        min(meta_length, LENGTH_MAX),
        min(content_length, LENGTH_MAX),
    )
    return DocumentTerms(counts, lengths, tuple(dict.fromkeys(tag_key(tag) for tag in tags)))
