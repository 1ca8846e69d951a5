"""Ranking tokenisation: Unicode-aware words, identifier compounds and light English stemming.

The rules, in order:

* Text is casefolded (``Straße`` -> ``strasse``) and split into runs of Unicode letters
  and digits; any other character separates words. There is no stop list: common words
  stay searchable and BM25's IDF makes them cheap.
* Runs joined by ``-``, ``.``, ``_`` or ``:`` also yield the whole joined form, so
  ``ADR-12`` gives ``adr``, ``12`` and ``adr12``, and ``3.11.2`` gives ``3``, ``11``,
  ``2`` and ``3.11.2``. The compound is rare, so an exact identifier or version string
  outweighs its scattered parts. A connector between letters and digits is dropped
  from the compound, so ``ADR-12`` and ``adr12`` analyse alike.
* Latin letters with diacritics are folded to their base letters (``café`` -> ``cafe``)
  only when the whole word folds to ASCII; other scripts keep their marks.
* A word mixing letters and digits also yields its runs: ``il6`` gives ``il6``, ``il``
  and ``6``, so it meets ``IL-6``; ``v2`` meets ``version 2`` on the digit.
* Han, kana and Hangul, which are written without spaces, are indexed as overlapping
  character bigrams (a single character stays a unigram).
* Words of ASCII letters are Porter-stemmed (``studies`` -> ``studi``). Digits, mixed
  letter-digit words, compounds and words in other scripts are never stemmed, so the
  English rules cannot damage identifiers or other languages.

Every function here is pure; stems and folds are memoised because vocabularies are small
compared with the number of token occurrences.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import cache, lru_cache
from itertools import chain

from ._stem import porter_stem

__all__ = ["analyze", "query_terms", "word_patterns"]


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
