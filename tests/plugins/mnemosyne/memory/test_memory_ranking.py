"""BM25F ranking and its tokenisation: terms, score signs, evidence order and ties."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mymcp.plugins.mnemosyne.memory import (
    Bm25Parameters,
    DocumentTerms,
    MemoryService,
    TermIndex,
    document_terms,
)
from mymcp.plugins.mnemosyne.memory import search as search_module
from mymcp.plugins.mnemosyne.memory.analysis import analyze, porter_stem, query_terms

Factory = Callable[..., dict[str, Any]]
Writer = Callable[..., Path]


@dataclass(frozen=True)
class Doc:
    """A ranking test document: its id, scope-relative path and analysed terms."""

    id: str
    path: str
    terms: DocumentTerms


def _candidate(
    identifier: str,
    path: str = "ns/x.json",
    *,
    title: str | None = None,
    content: str = "filler text",
    tags: tuple[str, ...] | None = None,
) -> Doc:
    return Doc(identifier, path, document_terms(title, path, tags or (), content))


def _ranked(index: TermIndex, docs: dict[int, Doc], text: str, **options: Any) -> list[Any]:
    tags = options.pop("tags", frozenset())
    limit = options.pop("limit", 5)
    hits = index.rank(
        "project", text, tags, limit, lambda slot: (docs[slot].path, docs[slot].id), **options
    )
    return [(docs[hit.slot].id, hit.score) for hit in hits]


def _rank(
    text: str, candidates: list[Doc], tags: frozenset[str] = frozenset(), limit: int = 5
) -> list[tuple[str, float]]:
    index = TermIndex()
    for slot, doc in enumerate(candidates):
        index.add(slot, "project", doc.terms)
    return _ranked(index, dict(enumerate(candidates)), text, tags=tags, limit=limit)


# -- tokenisation ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "terms"),
    [
        ("Studies showed running", ["studi", "show", "run"]),
        ("ADR-12", ["adr", "12", "adr12"]),
        ("adr12", ["adr12", "adr", "12"]),
        ("Python 3.11.2", ["python", "3", "11", "2", "3.11.2"]),
        ("snake_case", ["snake", "case", "snake_case"]),
        ("Straße café naïve", ["strass", "cafe", "naiv"]),
        ("the a of", ["the", "a", "of"]),  # no stop list: IDF makes them cheap
        ("Привет мир", ["привет", "мир"]),  # other scripts: casefolded, never stemmed
        ("हिन्दी भाषा", ["हिन्दी", "भाषा"]),  # combining vowel signs stay inside the word
        ("東京都", ["東京", "京都"]),  # CJK: character bigrams
        ("猫", ["猫"]),
    ],
)
def test_analyze(text: str, terms: list[str]) -> None:
    assert analyze(text) == terms


def test_query_terms_keep_the_surface_form() -> None:
    assert query_terms("Orchids ADR-7") == [
        ("orchids", "orchid"),
        ("adr", "adr"),
        ("7", "7"),
        ("adr-7", "adr7"),
    ]


def test_stemming_is_consistent_and_leaves_identifiers_alone() -> None:
    assert porter_stem("connections") == porter_stem("connected") == "connect"
    assert analyze("v2") == ["v2", "v", "2"]
    assert analyze("HX-4471") == ["hx", "4471", "hx4471"]
    assert analyze("t-cell") == ["t", "cell", "t-cell"]
    assert analyze("résumé") == analyze("resume")


# -- scoring --------------------------------------------------------------------------


def test_scores_are_positive_even_for_terms_in_every_record() -> None:
    candidates = [
        _candidate(f"m{i}", f"ns/{i}.json", content="common words here") for i in range(4)
    ]
    ranked = _rank("common", candidates)
    assert len(ranked) == 4
    assert all(score > 0 for _, score in ranked)


def test_rarer_terms_and_repeated_terms_score_higher() -> None:
    candidates = [
        _candidate("rare", "ns/a.json", content="zebra common"),
        _candidate("twice", "ns/b.json", content="common common"),
        _candidate("once", "ns/c.json", content="common other"),
        _candidate("none", "ns/d.json", content="unrelated words"),
    ]
    ranked = dict(_rank("zebra common", candidates))
    assert "none" not in ranked
    assert ranked["rare"] > ranked["twice"] > ranked["once"] > 0


def test_evidence_order_request_tag_then_title_then_path_or_tag_then_content() -> None:
    candidates = [
        _candidate("content", "ns/1.json", content="the orchid grows here"),
        _candidate("path", "orchid/2.json", content="nothing relevant"),
        _candidate("tagterm", "ns/3.json", content="nothing relevant", tags=("orchid care",)),
        _candidate("title", "ns/4.json", title="Orchid", content="nothing relevant"),
        _candidate("requested", "ns/5.json", content="nothing at all", tags=("Plants",)),
    ]
    ranked = [identifier for identifier, _ in _rank("orchid", candidates, frozenset({"plants"}))]
    assert ranked[0] == "requested"  # an exact request-tag match outranks any text
    assert ranked[1] == "title"
    assert set(ranked[2:4]) == {"path", "tagterm"}
    assert ranked[4] == "content"


def test_a_request_tag_outweighs_many_title_and_content_terms() -> None:
    candidates = [
        _candidate("text", "ns/a.json", title="alpha beta gamma", content="alpha beta gamma"),
        _candidate("tagged", "ns/b.json", content="unrelated", tags=("chosen",)),
    ]
    ranked = _rank("alpha beta gamma", candidates, frozenset({"chosen"}))
    assert [identifier for identifier, _ in ranked] == ["tagged", "text"]


def test_ties_fall_back_to_path_then_id() -> None:
    candidates = [
        _candidate("zz", "b/1.json", content="plum"),
        _candidate("yy", "a/1.json", content="plum"),
        _candidate("xx", "a/1.json", content="plum"),
    ]
    ranked = _rank("plum", candidates)
    assert [identifier for identifier, _ in ranked] == ["xx", "yy", "zz"]
    assert len({score for _, score in ranked}) == 1


def test_identifier_compound_beats_scattered_parts() -> None:
    candidates = [
        _candidate("exact", "ns/a.json", content="see ADR-12 for the reasoning"),
        _candidate("scattered", "ns/b.json", content="ADR list: 12 items, adr-3 too"),
    ]
    assert _rank("ADR-12", candidates)[0][0] == "exact"
    assert _rank("adr12", candidates)[0][0] == "exact"


def test_no_match_no_hits_and_limit_respected() -> None:
    candidates = [_candidate(f"m{i}", f"ns/{i:02}.json", content="pear") for i in range(9)]
    assert _rank("apple", candidates) == []
    assert len(_rank("pear", candidates)) == 5
    assert _rank("pear", candidates, limit=0) == []
    assert _rank("pear", []) == []


def test_incremental_index_matches_a_fresh_one() -> None:
    base = dict(
        enumerate(
            _candidate(f"m{i}", f"ns/{i}.json", content=f"kiwi word{i % 3}") for i in range(8)
        )
    )
    index = TermIndex()
    for slot, doc in base.items():
        index.add(slot, "project", doc.terms)
    assert _ranked(index, base, "kiwi word1") == _rank("kiwi word1", list(base.values()))
    for slot in (0, 6, 7):
        index.remove(slot)
        del base[slot]
    base[9] = _candidate("new", "ns/new.json", content="kiwi kiwi word1")
    index.add(9, "project", base[9].terms)
    fresh = TermIndex()
    for slot, doc in base.items():
        fresh.add(slot, "project", doc.terms)
    assert _ranked(index, base, "kiwi word1") == _ranked(fresh, base, "kiwi word1")


def _exhaustive(
    text: str,
    tags: frozenset[str],
    docs: dict[int, Doc],
    limit: int,
    eligible: set[int] | None = None,
) -> list[tuple[int, float, frozenset[str]]]:
    """BM25F by the formula, every document scored in full: what pruning must reproduce."""
    params = Bm25Parameters()
    averages = []
    for field in range(3):
        lengths = [d.terms.lengths[field] for d in docs.values() if d.terms.lengths[field] > 0]
        averages.append(sum(lengths) / len(lengths) if lengths else 1.0)
    surfaces: dict[str, list[str]] = {}
    for surface, term in query_terms(text):
        surfaces.setdefault(term, []).append(surface)
    weighted = []
    for term in surfaces:
        df = sum(term in d.terms.counts for d in docs.values())
        if df:
            n = len(docs)
            weighted.append((math.log(1 + (n - df + 0.5) / (df + 0.5)), term))
    weighted.sort(key=lambda item: (-item[0], item[1]))
    weighted = weighted[: search_module.MAX_QUERY_TERMS]  # only the rarest terms rank
    kept = {term for _, term in weighted}
    ceiling = sum(idf for idf, _ in weighted) + 1.0
    scored = []
    for slot, doc in docs.items():
        if eligible is not None and slot not in eligible:
            continue
        lengths = doc.terms.lengths
        norm = [
            params.weights[i] / ((1 - params.b[i]) + params.b[i] / averages[i] * lengths[i])
            for i in range(3)
        ]
        score, seen = 0.0, False
        for _tag in sorted(tags & set(doc.terms.tag_keys)):
            score, seen = score + ceiling, True
        for idf, term in weighted:
            packed = doc.terms.counts.get(term)
            if packed is not None:
                counts = (packed >> 22, packed >> 12 & 0x3FF, packed & 0xFFF)
                tf = counts[0] * norm[0] + counts[1] * norm[1] + counts[2] * norm[2]
                score, seen = score + idf * tf / (tf + params.k1), True
        if seen:
            terms = frozenset(
                s
                for t, forms in surfaces.items()
                if t in kept and t in doc.terms.counts
                for s in forms
            )
            scored.append((slot, score, terms))
    scored.sort(key=lambda hit: (-hit[1], docs[hit[0]].path, docs[hit[0]].id))
    return scored[:limit]


@pytest.mark.parametrize(
    ("rare", "term_at_a_time"),
    [(4, 0), (100_000, 0), (4, 100_000)],
    ids=["impact-order", "full-postings", "term-at-a-time"],
)
def test_pruned_incremental_scoring_equals_exhaustive_scoring(
    rare: int, term_at_a_time: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Impact-order walks, kept term scores, patched postings and reused slots change no
    float."""
    monkeypatch.setattr(search_module, "_SHORT_POSTINGS", rare)
    monkeypatch.setattr(search_module, "_TERM_AT_A_TIME_POSTINGS", term_at_a_time)
    monkeypatch.setattr(search_module, "_SMALL_SELECTION", 0)
    # A tiny sorted head, so walks also meet the unsorted tail and sort it in.
    monkeypatch.setattr(search_module, "_IMPACT_HEAD", 3)
    # Few enough ranked terms that the longer queries below lose their commonest ones.
    monkeypatch.setattr(search_module, "MAX_QUERY_TERMS", 6)
    generator = random.Random(7)
    vocabulary = [f"w{i}" for i in range(80)]
    weights = [1 / (rank + 1) for rank in range(len(vocabulary))]  # Zipf-like

    def words(count: int) -> str:
        return " ".join(generator.choices(vocabulary, weights, k=count))

    index = TermIndex()
    docs: dict[int, Doc] = {}
    free: list[int] = []
    fresh_slot = 0
    checked = 0
    while checked < 400:
        action = generator.random()
        if action < 0.55 or not docs:
            if free:
                slot = free.pop()
            else:
                slot, fresh_slot = fresh_slot, fresh_slot + 1
            title = words(generator.randint(1, 6)) if generator.random() < 0.7 else None
            tags = tuple(generator.sample(vocabulary[:10], generator.randint(0, 2)))
            path = f"ns/{slot:04d}.json"
            docs[slot] = _candidate(f"m{slot}", path, title=title, content=words(40), tags=tags)
            index.add(slot, "project", docs[slot].terms)
        elif action < 0.75:
            slot = generator.choice(sorted(docs))
            index.remove(slot)
            del docs[slot]
            free.append(slot)
        else:
            text = words(generator.randint(1, 16))
            tags = frozenset(generator.sample(vocabulary[:10], generator.randint(0, 1)))
            limit = generator.choice((1, 5, 20))
            eligible = None
            if generator.random() < 0.3:
                eligible = set(generator.sample(sorted(docs), max(1, len(docs) // 3)))
            hits = index.rank(
                "project", text, tags, limit, lambda s: (docs[s].path, docs[s].id), eligible
            )
            got = [(hit.slot, hit.score, hit.matched_terms) for hit in hits]
            assert got == _exhaustive(text, tags, docs, limit, eligible)
            checked += 1


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.booleans(), st.integers(0, 11), st.integers(1, 3)), min_size=1, max_size=40
    )
)
def test_records_added_at_the_head_s_value_are_never_skipped_by_a_walk(
    operations: list[tuple[bool, int, int]],
) -> None:
    """Documents of equal value around the sorted head's boundary, added and removed
    between walks: a walk that sorts the tail in must not pass over one of them (it once
    did when an added document tied the head's last value with a lower slot)."""
    saved = (
        search_module._SHORT_POSTINGS,
        search_module._TERM_AT_A_TIME_POSTINGS,
        search_module._SMALL_SELECTION,
        search_module._IMPACT_HEAD,
    )
    search_module._SHORT_POSTINGS = search_module._TERM_AT_A_TIME_POSTINGS = 0
    search_module._SMALL_SELECTION, search_module._IMPACT_HEAD = 0, 1
    try:
        index = TermIndex()
        docs: dict[int, Doc] = {}
        for add, slot, repeats in operations:
            if add and slot not in docs:
                # Few distinct contents, so values tie a lot; "other" keeps norms moving.
                content = " ".join(["kiwi"] * repeats + ["other"] * (4 - repeats))
                docs[slot] = _candidate(f"m{slot}", f"ns/{slot:02d}.json", content=content)
                index.add(slot, "project", docs[slot].terms)
            elif not add and slot in docs:
                index.remove(slot)
                del docs[slot]
            if docs:
                for limit in (1, 3, 8):
                    hits = index.rank(
                        "project", "kiwi", frozenset(), limit, lambda s: (docs[s].path, docs[s].id)
                    )
                    got = [(hit.slot, hit.score, hit.matched_terms) for hit in hits]
                    assert got == _exhaustive("kiwi", frozenset(), docs, limit)
    finally:
        (
            search_module._SHORT_POSTINGS,
            search_module._TERM_AT_A_TIME_POSTINGS,
            search_module._SMALL_SELECTION,
            search_module._IMPACT_HEAD,
        ) = saved


def test_a_restored_term_index_ranks_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    # Small bounds, so the saved state holds impact orders with unsorted tails too.
    monkeypatch.setattr(search_module, "_SHORT_POSTINGS", 4)
    monkeypatch.setattr(search_module, "_IMPACT_HEAD", 3)
    monkeypatch.setattr(search_module, "_TERM_AT_A_TIME_POSTINGS", 0)
    generator = random.Random(11)
    vocabulary = [f"v{i}" for i in range(40)]
    weights = [1 / (rank + 1) for rank in range(len(vocabulary))]

    def doc(slot: int) -> Doc:
        text = " ".join(generator.choices(vocabulary, weights, k=20))
        return _candidate(f"d{slot}", f"ns/{slot}.json", content=text, tags=(vocabulary[slot % 5],))

    docs = {slot: doc(slot) for slot in range(60)}
    index = TermIndex()
    for slot, item in docs.items():
        index.add(slot, "project", item.terms)
    index.remove(3)
    del docs[3]
    queries = ("v0 v1", "v2", "v1 v3 v5 v9", "v0 v0 v4", "nothing")
    for text in queries:  # materialise impact orders before saving
        _ranked(index, docs, text)
    restored = TermIndex.restore(index.export())
    assert len(restored) == len(index) == 59
    for round_ in range(3):
        for text in queries:
            for tags in (frozenset(), frozenset({"v2"})):
                got = _ranked(restored, docs, text, tags=tags)
                assert got == _ranked(index, docs, text, tags=tags), (round_, text)
        # Both keep following the same changes.
        slot = 60 + round_
        docs[slot] = doc(slot)
        for target in (index, restored):
            target.add(slot, "project", docs[slot].terms)
            target.remove(10 + round_)
        del docs[10 + round_]


def test_words_no_record_holds_any_more_leave_the_saved_vocabulary() -> None:
    index = TermIndex()
    shared = _candidate("a", "ns/a.json", content="kiwi orchard")
    single = _candidate("b", "ns/b.json", title="Quokka", content="kiwi", tags=("zqxtag",))
    other_scope = _candidate("c", "ns/c.json", content="orchard wombat")
    index.add(0, "project", shared.terms)
    index.add(1, "project", single.terms)
    index.add(2, "knowledge", other_scope.terms)
    assert {"quokka", "zqxtag"} <= set(index.export()["words"] + index.export()["tag_words"])
    index.remove(1)
    saved = index.export()
    assert "quokka" not in saved["words"]
    assert "zqxtag" not in saved["tag_words"]
    assert {"kiwi", "orchard", "wombat"} <= set(saved["words"])
    index.remove(0)  # "orchard" is still held in the other scope, "kiwi" is not
    saved = index.export()
    assert "kiwi" not in saved["words"]
    assert "orchard" in saved["words"]
    # A dropped word that comes back is found again, before and after a restore.
    index.add(3, "project", _candidate("d", "ns/d.json", content="quokka kiwi").terms)
    docs = {3: _candidate("d", "ns/d.json"), 2: other_scope}
    assert [hit for hit, _ in _ranked(index, docs, "quokka")] == ["d"]
    restored = TermIndex.restore(index.export())
    assert [hit for hit, _ in _ranked(restored, docs, "quokka kiwi")] == ["d"]
    assert _ranked(restored, docs, "zqxtag") == []


# -- through the service --------------------------------------------------------------


def test_service_default_is_bm25_and_reports_surface_terms(
    write: Writer, v2: Factory, service: MemoryService
) -> None:
    short = v2(title=None, content="kiwi apple")
    repeated = v2(title=None, content="kiwi kiwis")
    write(short)
    write(repeated)
    outcome = service.recall({"query": "Kiwis", "scope": "project"})
    memories = outcome.payload["memories"]
    assert [m["id"] for m in memories] == [repeated["id"], short["id"]]
    assert memories[0]["match"] == {"terms": ["kiwis"], "tags": []}


def test_hand_edits_show_on_the_next_call(
    write: Writer, v2: Factory, service: MemoryService
) -> None:
    body = v2(title=None, content="plain words")
    other = v2(title=None, content="plain words too")
    write(body)
    write(other)
    assert service.recall({"query": "nectarine", "scope": "project"}).payload["memories"] == []
    path = write({**body, "content": "a nectarine note"})
    ids = [m["id"] for m in service.recall({"query": "nectarine", "scope": "project"}).payload[
        "memories"
    ]]  # fmt: skip
    assert ids == [body["id"]]
    path.unlink()
    assert service.recall({"query": "nectarine", "scope": "project"}).payload["memories"] == []
