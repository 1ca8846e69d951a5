"""BM25F ranking and its tokenisation: terms, score signs, evidence order and ties."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mymcp.plugins.mnemosyne.memory import (
    Bm25Parameters,
    Bm25Ranker,
    MemoryRecordV1,
    MemoryService,
    RankCandidate,
    RecallQuery,
)
from mymcp.plugins.mnemosyne.memory.search import (
    analyze,
    extract_record_terms,
    porter_stem,
    query_terms,
)

Factory = Callable[..., dict[str, Any]]
Writer = Callable[..., Path]


def _candidate(
    identifier: str,
    path: str = "ns/x.json",
    *,
    title: str | None = None,
    content: str = "filler text",
    tags: tuple[str, ...] | None = None,
) -> RankCandidate:
    record = MemoryRecordV1(id=identifier, content=content, title=title, tags=tags)
    return RankCandidate(identifier, path, extract_record_terms(record, path))


def _rank(
    text: str, candidates: list[RankCandidate], tags: frozenset[str] = frozenset()
) -> list[tuple[str, float]]:
    hits = Bm25Ranker()(RecallQuery(text, tags), candidates, 5)
    return [(candidates[hit.position].id, hit.score) for hit in hits]


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
    assert Bm25Ranker()(RecallQuery("pear", frozenset()), candidates, 0) == []
    assert Bm25Ranker()(RecallQuery("pear", frozenset()), [], 5) == []


def test_incremental_corpus_matches_a_fresh_one() -> None:
    base = [_candidate(f"m{i}", f"ns/{i}.json", content=f"kiwi word{i % 3}") for i in range(8)]
    ranker = Bm25Ranker()
    query = RecallQuery("kiwi word1", frozenset())
    ranker(query, base, 5)
    changed = [*base[1:6], _candidate("new", "ns/new.json", content="kiwi kiwi word1")]
    incremental = ranker(query, changed, 5)
    fresh = Bm25Ranker()(query, changed, 5)
    assert incremental == fresh
    # Back to the first set: patched again, still identical to a fresh ranking.
    assert ranker(query, base, 5) == Bm25Ranker()(query, base, 5)


def _exhaustive(
    query: RecallQuery, candidates: list[RankCandidate], limit: int
) -> list[tuple[int, float, frozenset[str]]]:
    """BM25F by the formula, every candidate scored in full: what pruning must reproduce."""
    params = Bm25Parameters()
    fields = [candidate.terms.fields for candidate in candidates]
    averages = []
    for field in range(3):
        lengths = [f.lengths[field] for f in fields if f.lengths[field] > 0]
        averages.append(sum(lengths) / len(lengths) if lengths else 1.0)
    norms = [
        tuple(
            params.weights[i] / ((1 - params.b[i]) + params.b[i] / averages[i] * f.lengths[i])
            for i in range(3)
        )
        for f in fields
    ]
    surfaces: dict[str, list[str]] = {}
    for surface, term in query_terms(query.text):
        surfaces.setdefault(term, []).append(surface)
    weighted = []
    for term in surfaces:
        df = sum(term in f.tf for f in fields)
        if df:
            n = len(candidates)
            weighted.append((math.log(1 + (n - df + 0.5) / (df + 0.5)), term))
    weighted.sort(key=lambda item: (-item[0], item[1]))
    ceiling = sum(idf for idf, _ in weighted) + 1.0
    scored = []
    for position, (candidate, f, n) in enumerate(zip(candidates, fields, norms, strict=True)):
        score, seen = 0.0, False
        for _tag in sorted(query.tag_keys & candidate.terms.tag_keys):
            score, seen = score + ceiling, True
        for idf, term in weighted:
            counts = f.tf.get(term)
            if counts is not None:
                tf = counts[0] * n[0] + counts[1] * n[1] + counts[2] * n[2]
                score, seen = score + idf * tf / (tf + params.k1), True
        if seen:
            terms = frozenset(s for t, forms in surfaces.items() if t in f.tf for s in forms)
            scored.append((position, score, terms))
    scored.sort(key=lambda hit: (-hit[1], candidates[hit[0]].path, candidates[hit[0]].id))
    return scored[:limit]


def test_pruned_incremental_scoring_equals_exhaustive_scoring() -> None:
    """MaxScore pruning, memoised term scores and corpus patching change no float."""
    generator = random.Random(7)
    vocabulary = [f"w{i}" for i in range(80)]
    weights = [1 / (rank + 1) for rank in range(len(vocabulary))]  # Zipf-like

    def words(count: int) -> str:
        return " ".join(generator.choices(vocabulary, weights, k=count))

    def candidate(number: int) -> RankCandidate:
        title = words(generator.randint(1, 6)) if generator.random() < 0.7 else None
        tags = tuple(generator.sample(vocabulary[:10], generator.randint(0, 2)))
        return _candidate(
            f"m{number}", f"ns/{number}.json", title=title, content=words(60), tags=tags
        )

    pool = [candidate(number) for number in range(400)]
    ranker = Bm25Ranker()
    for round_ in range(6):
        candidates = generator.sample(pool, 150 + 40 * round_)
        for _ in range(25):
            text = words(generator.randint(1, 12))
            tags = frozenset(generator.sample(vocabulary[:10], generator.randint(0, 1)))
            query = RecallQuery(text, tags)
            for limit in (1, 5, 20):
                hits = ranker(query, candidates, limit)
                got = [(hit.position, hit.score, hit.matched_terms) for hit in hits]
                assert got == _exhaustive(query, candidates, limit)


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
