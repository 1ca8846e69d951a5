"""Recall-quality regression on a small labelled set of personal notes.

``fixtures/notes`` uses the format of the shared recall benchmark (corpus, queries and
graded qrels as JSON Lines): 50 short notes with titles, tags, identifiers such as
``ADR-12`` or ``HX-4471``, version strings and a few non-English entries, and 42 queries
with judgements written by hand. Records are written exactly as the plugin writes them
and recalled through the service. The test fails if quality drops below the floors
recorded here (measured values minus a small margin).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from mymcp.plugins.mnemosyne.memory import (
    CursorCodec,
    Lifecycle,
    MemoryRecordV2,
    MemoryService,
    Namespace,
    Provenance,
    Scope,
    V2Reference,
    reference_parts,
    serialize_record,
)

from .conftest import settle
from .reference_ranking import load_records, reference_rank

FIXTURE = Path(__file__).parent / "fixtures" / "notes"
# Measured with the default BM25F ranking: R@5 0.976, MRR@5 0.976, nDCG@5 0.961
# (reference_rank: 0.952, 0.925, 0.915).
FLOOR = {"R@5": 0.95, "MRR@5": 0.95, "nDCG@5": 0.93}


def _jsonl(name: str) -> list[dict[str, Any]]:
    lines = (FIXTURE / name).read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _load(root: Path) -> dict[str, str]:
    """Write every note as a canonical record; returns memory id -> fixture id."""
    ids = {}
    for number, doc in enumerate(_jsonl("corpus.jsonl")):
        memory_id = f"mem_{number:032x}"
        record = MemoryRecordV2(
            id=memory_id,
            scope=Scope.KNOWLEDGE,
            namespace=Namespace("topic", "notes", None),
            collection=None,
            kind="reference",
            language="und",
            title=doc["title"],
            content=doc["content"],
            tags=tuple(doc["tags"]),
            provenance=Provenance("explicit_user_statement", "memory_remember"),
            lifecycle=Lifecycle("active", 1),
            created_at="2026-01-01T00:00:00Z",
            updated_at="2026-01-01T00:00:00Z",
        )
        parts = reference_parts(V2Reference(Scope.KNOWLEDGE, "notes", None, memory_id))
        path = root.joinpath(*parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(serialize_record(record))
        settle(path)
        ids[memory_id] = doc["id"]
    return ids


def _score(run: dict[str, list[str]]) -> dict[str, float]:
    """The shared scorer's R@5, MRR and nDCG (linear gain), on at most five results."""
    qrels: dict[str, dict[str, int]] = {}
    for row in _jsonl("qrels.jsonl"):
        if row["relevance"] > 0:
            qrels.setdefault(row["query_id"], {})[row["memory_id"]] = row["relevance"]
    recall = mrr = ndcg = 0.0
    for query_id, relevant in qrels.items():
        ranked = list(dict.fromkeys(run.get(query_id, [])))[:5]
        recall += len(set(ranked) & relevant.keys()) / len(relevant)
        mrr += next((1 / (i + 1) for i, m in enumerate(ranked) if m in relevant), 0.0)
        dcg = sum(relevant.get(m, 0) / math.log2(i + 2) for i, m in enumerate(ranked))
        ideal = sorted(relevant.values(), reverse=True)[:5]
        ndcg += dcg / sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    count = len(qrels)
    return {"R@5": recall / count, "MRR@5": mrr / count, "nDCG@5": ndcg / count}


def _measure(tmp_path: Path) -> dict[str, float]:
    """The service's own ranking, through ``MemoryService.recall``."""
    root = tmp_path / "memory"
    ids = _load(root)
    service = MemoryService(lambda: root, 10_000, CursorCodec.generate())
    run = {}
    for query in _jsonl("queries.jsonl"):
        arguments: dict[str, Any] = {"query": query["query"], "scope": "knowledge"}
        if query["tags"]:
            arguments["tags"] = query["tags"]
        outcome = service.recall(arguments)
        assert not outcome.is_error, outcome.payload
        run[query["id"]] = [ids[item["id"]] for item in outcome.payload["memories"]]
    return _score(run)


def _measure_reference(tmp_path: Path) -> dict[str, float]:
    """The reference ranking the service replaced, over the same records."""
    root = tmp_path / "memory"
    ids = _load(root)
    records = load_records(root / "knowledge")
    run = {
        query["id"]: [ids[hit.id] for hit in reference_rank(query["query"], query["tags"], records)]
        for query in _jsonl("queries.jsonl")
    }
    return _score(run)


def test_default_ranking_stays_above_the_recorded_floor(tmp_path: Path) -> None:
    quality = _measure(tmp_path)
    for metric, floor in FLOOR.items():
        assert quality[metric] >= floor, (metric, quality)


@pytest.mark.parametrize("metric", ["R@5", "MRR@5", "nDCG@5"])
def test_default_ranking_beats_the_reference_ranking(tmp_path: Path, metric: str) -> None:
    default = _measure(tmp_path / "default")
    reference = _measure_reference(tmp_path / "reference")
    assert default[metric] > reference[metric], (default, reference)
