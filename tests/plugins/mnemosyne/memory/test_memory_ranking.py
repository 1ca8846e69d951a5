"""BM25F ranking and its tokenisation: terms, score signs, evidence order and ties."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mymcp.plugins.mnemosyne.memory import (
    Bm25Ranker,
    CursorCodec,
    MemoryRecordV1,
    MemoryService,
    RankCandidate,
    RecallQuery,
    reference_rank,
)
from mymcp.plugins.mnemosyne.memory._stem import porter_stem
from mymcp.plugins.mnemosyne.memory._terms import extract_record_terms
from mymcp.plugins.mnemosyne.memory._tokenize import analyze, query_terms

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
    hits = Bm25Ranker()(RecallQuery(frozenset(), tags, text), candidates, 5)
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
    assert Bm25Ranker()(RecallQuery(frozenset(), frozenset(), "pear"), candidates, 0) == []
    assert Bm25Ranker()(RecallQuery(frozenset(), frozenset(), "pear"), [], 5) == []


def test_query_from_bare_terms_still_ranks() -> None:
    candidates = [_candidate("a", content="orchids bloom")]
    hits = Bm25Ranker()(RecallQuery(frozenset({"orchid"}), frozenset()), candidates, 5)
    assert [hit.position for hit in hits] == [0]


def test_incremental_corpus_matches_a_fresh_one() -> None:
    base = [_candidate(f"m{i}", f"ns/{i}.json", content=f"kiwi word{i % 3}") for i in range(8)]
    ranker = Bm25Ranker()
    query = RecallQuery(frozenset(), frozenset(), "kiwi word1")
    ranker(query, base, 5)
    changed = [*base[1:6], _candidate("new", "ns/new.json", content="kiwi kiwi word1")]
    incremental = ranker(query, changed, 5)
    fresh = Bm25Ranker()(query, changed, 5)
    assert incremental == fresh
    # Back to the first set: patched again, still identical to a fresh ranking.
    assert ranker(query, base, 5) == Bm25Ranker()(query, base, 5)


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


def test_reference_rank_stays_available(
    root: Path, codec: CursorCodec, write: Writer, v2: Factory
) -> None:
    write(v2(title=None, content="kiwi kiwi", memory_id="mem_" + "b" * 32))
    write(v2(title=None, content="kiwi", memory_id="mem_" + "a" * 32))
    service = MemoryService(lambda: root, 100, codec, ranker=reference_rank)
    ids = [m["id"] for m in service.recall({"query": "kiwi", "scope": "project"}).payload[
        "memories"
    ]]  # fmt: skip
    assert ids == ["mem_" + "a" * 32, "mem_" + "b" * 32]
