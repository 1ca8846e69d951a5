"""Recall through the service: validation, scoring, ordering and result shape.

The service ranks with BM25F (see test_memory_ranking*.py); the reference ranking it
replaced lives on as a yardstick in ``reference_ranking.py``, tested here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from mymcp.plugins.mnemosyne.memory import CursorCodec, MemoryRecordV1, MemoryService
from tests.log_capture import attached

from .reference_ranking import load_records, reference_rank, tokenize

Factory = Callable[..., dict[str, Any]]
Writer = Callable[..., Path]


def _ids(service: MemoryService, **arguments: Any) -> list[str]:
    outcome = service.recall({"scope": "project", **arguments})
    assert not outcome.is_error, outcome.payload
    return [item["id"] for item in outcome.payload["memories"]]


def test_tokenizer_rules() -> None:
    assert tokenize("What is THE user's favourite_tea? A b 42 x9") == (
        "favourite", "tea", "42", "x9",
    )  # fmt: skip
    assert tokenize("Straße café") == ("strasse", "café")


def test_evidence_weights_follow_the_contract(
    write: Writer, v2: Factory, service: MemoryService
) -> None:
    tag = v2(tags=["orchid"], content="nothing relevant", title=None)
    title = v2(title="orchid", content="nothing relevant")
    content = v2(title=None, content="an orchid grows")
    path = v2(namespace="orchid", title=None, content="nothing relevant")
    for body in (tag, title, content, path):
        write(body)
    outcome = service.recall({"query": "orchid", "scope": "project", "tags": ["ORCHID"]})
    ids = [m["id"] for m in outcome.payload["memories"]]
    # tag: 4 (request tag) + 2 (tag term) = 6; title 3; path 2; content 1.
    assert ids == [tag["id"], title["id"], path["id"], content["id"]]
    first = outcome.payload["memories"][0]
    assert first["match"] == {"terms": ["orchid"], "tags": ["orchid"]}


def test_term_frequency_does_not_count_in_the_reference_ranking(
    root: Path, write: Writer, v2: Factory
) -> None:
    a = v2(title=None, content="kiwi kiwi kiwi kiwi", memory_id="mem_" + "b" * 32)
    b = v2(title=None, content="kiwi", memory_id="mem_" + "a" * 32)
    write(a)
    write(b)
    ranked = reference_rank("kiwi", (), load_records(root / "project"))
    # Equal scores: the scope-relative path (which embeds the id) breaks the tie.
    assert [hit.id for hit in ranked] == [b["id"], a["id"]]


def test_ties_use_path_then_id(write: Writer, v1: Factory, service: MemoryService) -> None:
    write(v1(memory_id="zz", content="plum"), "project/a/1.json")
    write(v1(memory_id="aa", content="plum"), "project/b/1.json")
    write(v1(memory_id="mm", content="plum"), "project/a/0.json")
    assert _ids(service, query="plum") == ["mm", "zz", "aa"]


def test_at_most_five_archived_excluded_and_zero_scores_dropped(
    write: Writer, v2: Factory, service: MemoryService
) -> None:
    for _ in range(7):
        write(v2(content="pear"))
    archived = v2(content="pear pear", title="pear", state="archived", revision=2)
    write(archived)
    write(v2(content="unrelated"))
    ids = _ids(service, query="pear")
    assert len(ids) == 5
    assert archived["id"] not in ids


def test_no_matches_and_missing_scope(
    root: Path, service: MemoryService, write: Writer, v2: Factory
) -> None:
    assert service.recall({"query": "x y", "scope": "agent"}).payload == {
        "status": "no_matches",
        "memories": [],
    }
    write(v2(content="apple"))
    assert service.recall({"query": "the is", "scope": "project"}).payload["status"] == "no_matches"


def test_a_record_sharing_only_function_words_with_the_query_is_no_match(
    service: MemoryService, write: Writer, v2: Factory
) -> None:
    write(
        v2(memory_id="mem_" + "1" * 32, title="Capital", content="The capital of France is Paris.")
    )
    write(
        v2(
            memory_id="mem_" + "2" * 32,
            title="Starter",
            content="Feed the starter daily.",
            tags=["dog"],
        )
    )
    for question in ("What is the name of my dog?", "what is the", "How do I fix the car"):
        outcome = service.recall({"query": question, "scope": "project"})
        memories = outcome.payload["memories"]
        # Only the record tagged "dog" (the one word that matters) answers the first.
        assert [m["title"] for m in memories] == (["Starter"] if "dog" in question else [])
        assert outcome.payload["status"] == ("ok" if memories else "no_matches")
    # One word that matters is enough, whatever else the query holds.
    assert _ids(service, query="What is the capital of France?") == ["mem_" + "1" * 32]


def test_namespace_narrows_and_excludes_legacy(
    write: Writer, v1: Factory, v2: Factory, service: MemoryService
) -> None:
    inside = v2(namespace="garden", content="rose", collection="beds")
    outside = v2(namespace="kitchen", content="rose")
    write(inside)
    write(outside)
    write(v1(content="rose"), "project/garden/legacy.json")
    assert set(_ids(service, query="rose")) == {inside["id"], outside["id"], "legacy-one"}
    assert _ids(service, query="rose", namespace_id="garden") == [inside["id"]]
    assert _ids(service, query="rose", namespace_id="absent") == []


def test_result_item_shape_has_no_paths_or_scores(
    write: Writer, v1: Factory, v2: Factory, service: MemoryService
) -> None:
    body = v2(collection="c", title="Fig", content="fig tree", tags=["Fruit Trees"])
    write(body)
    write(v1(title="Fig", content="fig", tags=["x"]), "project/old.json")
    items = service.recall({"query": "fig", "scope": "project", "tags": ["fruit  trees"]}).payload
    canonical, legacy = items["memories"]
    assert canonical == {
        "reference": {
            "schema_version": 2,
            "scope": "project",
            "namespace_id": "mnemosyne",
            "collection_id": "c",
            "id": body["id"],
        },
        "id": body["id"],
        "scope": "project",
        "title": "Fig",
        "content": "fig tree",
        "tags": ["Fruit Trees"],
        "match": {"terms": ["fig"], "tags": ["Fruit Trees"]},
    }
    assert legacy["reference"] == {"schema_version": 1, "scope": "project", "id": "legacy-one"}


@pytest.mark.parametrize(
    ("arguments", "code"),
    [
        ({"scope": "project"}, "invalid_query"),
        ({"query": "", "scope": "project"}, "invalid_query"),
        ({"query": "   ", "scope": "project"}, "invalid_query"),
        ({"query": "q" * 1001, "scope": "project"}, "invalid_query"),
        ({"query": 5, "scope": "project"}, "invalid_query"),
        ({"query": "q", "scope": "project", "path": "/etc"}, "invalid_request"),
        ({"query": "q", "scope": "work"}, "invalid_scope"),
        ({"query": "q"}, "invalid_scope"),
        ({"query": "q", "scope": "project", "namespace_id": "Bad"}, "invalid_namespace"),
        ({"query": "q", "scope": "project", "namespace_id": None}, "invalid_namespace"),
        ({"query": "q", "scope": "project", "tags": []}, "invalid_tags"),
        ({"query": "q", "scope": "project", "tags": ["a", "A"]}, "invalid_tags"),
        ({"query": "q", "scope": "project", "tags": ["x" * 51]}, "invalid_tags"),
        ({"query": "q", "scope": "project", "tags": "a"}, "invalid_tags"),
    ],
)
def test_invalid_arguments(service: MemoryService, arguments: dict[str, Any], code: str) -> None:
    outcome = service.recall(arguments)
    assert outcome.is_error
    assert outcome.payload["status"] == "invalid_request"
    assert outcome.payload["code"] == code
    # The error names the argument at fault and says why, in fixed words.
    assert set(outcome.payload) == {"status", "code", "field", "reason", "message"}
    field = outcome.payload["field"]
    assert field in arguments or field in ("query", "scope")
    assert outcome.payload["message"].startswith(field) or outcome.payload["reason"] == "unexpected"


def test_an_unknown_argument_is_named_not_blamed_on_the_query(service: MemoryService) -> None:
    payload = service.recall({"query": "fine words", "scope": "project", "limit": 3}).payload
    assert payload["code"] == "invalid_request"
    assert (payload["field"], payload["reason"]) == ("limit", "unexpected")
    assert "query" in payload["message"]  # it lists what the tool accepts


def test_recall_reports_storage_trouble_as_retrieval_error(
    tmp_path: Path, codec: CursorCodec, write: Writer, v1: Factory, root: Path
) -> None:
    not_dir = tmp_path / "file"
    not_dir.write_text("x")
    broken = MemoryService(lambda: not_dir, 10, codec)
    payload = broken.recall({"query": "q", "scope": "self"}).payload
    assert (payload["status"], payload["code"]) == ("retrieval_error", "memory_source_unavailable")
    for number in range(3):
        write(v1(memory_id=f"n{number}"), f"self/{number}.json")
    small = MemoryService(lambda: root, 2, codec)
    with _captured("mcp.memory_recall") as lines:
        payload = small.recall({"query": "q", "scope": "self"}).payload
    assert (payload["status"], payload["code"]) == ("retrieval_error", "candidate_limit_exceeded")
    # Both the answer and the log name the limit's setting, so the operator knows the fix.
    assert payload["message"] == (
        "the selected memory source holds more than 2 candidate files, the candidate limit; "
        "the operator raises it with [memory] candidate_limit in ~/.mnemosyne/config.toml or "
        "MNEMOSYNE_MEMORY_CANDIDATE_LIMIT (at most 1000000)"
    )
    assert lines == [
        "event=memory_recall outcome=retrieval_error code=candidate_limit_exceeded "
        "scope=self namespace=absent tags=0 setting=candidate_limit"
    ]


@contextmanager
def _captured(name: str) -> Iterator[list[str]]:
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    with attached(Collect(), name, logging.INFO):
        yield lines


def _legacy(identifier: str, path: str, **text: str) -> tuple[str, MemoryRecordV1]:
    record = MemoryRecordV1(
        id=identifier, content=text.get("content", "zzz"), title=text.get("title")
    )
    return path, record


def test_reference_rank_is_a_standalone_function() -> None:
    records = [
        _legacy("b", "x/b.json", content="alpha beta"),
        _legacy("a", "x/a.json", title="alpha"),
        _legacy("c", "alpha/c.json"),
        _legacy("d", "x/d.json", content="gamma"),
    ]
    hits = reference_rank("alpha beta", (), records)
    # b and c tie at 2: the scope-relative path decides ("alpha/..." < "x/...").
    assert [hit.id for hit in hits] == ["a", "c", "b"]
    assert [hit.score for hit in hits] == [3, 2, 2]
    assert hits[2].matched_terms == {"alpha", "beta"}
    assert reference_rank("alpha beta", (), records, 1) == hits[:1]


def test_selected_namespace_symlink_is_skipped_and_non_directory_unavailable(
    root: Path, tmp_path: Path, write: Writer, v2: Factory, service: MemoryService
) -> None:
    elsewhere = tmp_path / "elsewhere"
    body = v2(namespace="linked", content="rose")
    write(body)
    (root / "project" / "linked").rename(elsewhere)
    (root / "project" / "linked").symlink_to(elsewhere, target_is_directory=True)
    (root / "project" / "flat").write_text("not a directory")
    assert _ids(service, query="rose", namespace_id="linked") == []
    outcome = service.recall({"query": "rose", "scope": "project", "namespace_id": "flat"})
    assert (outcome.payload["status"], outcome.payload["code"]) == (
        "retrieval_error",
        "memory_source_unavailable",
    )


def test_the_candidate_limit_bounds_a_recall_by_its_namespace(
    codec: CursorCodec, write: Writer, v2: Factory, root: Path
) -> None:
    """The namespace is the recall's selection: a scope past the limit still recalls from
    a namespace within it, as it still lists it, while the whole scope is refused."""
    for number in range(4):
        write(v2(namespace="crowded", content=f"crowded harbour note {number}"))
    alone = v2(namespace="quiet", content="a quiet harbour at dawn")
    write(alone)
    service = MemoryService(lambda: root, 3, codec)
    for _ in range(2):  # the second time the index already knows the scope's size
        whole = service.recall({"query": "harbour", "scope": "project"}).payload
        assert (whole["status"], whole["code"]) == ("retrieval_error", "candidate_limit_exceeded")
        crowded = service.recall(
            {"query": "harbour", "scope": "project", "namespace_id": "crowded"}
        ).payload
        assert crowded["code"] == "candidate_limit_exceeded"
        quiet = service.recall(
            {"query": "harbour", "scope": "project", "namespace_id": "quiet"}
        ).payload
        assert quiet["status"] == "ok", quiet
        assert [m["reference"]["id"] for m in quiet["memories"]] == [alone["id"]]
        listed = service.list({"scope": "project", "namespace_id": "quiet"}).payload
        assert [m["reference"]["id"] for m in listed["memories"]] == [alone["id"]]
