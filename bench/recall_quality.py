"""Recall-quality benchmark: the default ranking against the reference ranking, same run.

Loads a dataset in the format of ``../shared/bench/recall/`` (corpus/queries/qrels JSON
Lines) into a temporary memory root as canonical version-2 records, written exactly as
the plugin writes them (``serialize_record`` at the ``reference_parts`` path; scope
``knowledge``, namespace ``scifact`` by default, kind ``reference``, title from the
document title, content cut to the domain's 4000-character limit, no tags). Then, for
every query:

* in process, through ``MemoryService.recall`` (the server's ranking), and through the
  reference ranking it replaced (``tests/.../reference_ranking.py``, set overlap of
  query terms with title, path, tags and content);
* over HTTP, through a real ``python -m mymcp.cli`` server started in a temporary
  HOME/XDG sandbox with ``MNEMOSYNE_MEMORY_ROOT`` pointing at the same root
  (``initialize``, then ``tools/call memory_recall``).

The HTTP rankings must equal the in-process ones exactly (the run fails otherwise).
Prints R@5, MRR and nDCG with the shared scorer's definitions on the at most five
results (so MRR@10/nDCG@10 are effectively cut at 5), recall latency p50/p95, and a
latency case over HTTP on a root of 1,000 records.

    python bench/recall_quality.py [DATASET_DIR] [--namespace scifact] [--latency-records 1000]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mcp_client import McpClient, mcp_server  # noqa: E402

from mymcp.plugins.mnemosyne.memory import (  # noqa: E402
    CONTENT_MAX,
    TITLE_MAX,
    CursorCodec,
    Lifecycle,
    MemoryRecordV2,
    MemoryService,
    Namespace,
    Provenance,
    Scope,
    V2Reference,
    normalize_bounded_text,
    reference_parts,
    serialize_record,
)
from tests.plugins.mnemosyne.memory.reference_ranking import (  # noqa: E402
    load_records,
    reference_rank,
)

DEFAULT_DATASET = ROOT.parent / "shared" / "bench" / "recall" / "scifact"


def _load_score_module(dataset: Path) -> Any:
    """The shared scorer (``score.py`` next to the dataset folder), imported by path."""
    import importlib.util

    path = dataset.parent / "score.py"
    spec = importlib.util.spec_from_file_location("recall_score", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"scorer not found: {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _text(value: str, limit: int) -> str:
    """Normalise like the store, then cut to the limit (at a space when one is near)."""
    text = normalize_bounded_text(value, 10**9) or ""
    if len(text) <= limit:
        return text
    cut = text[:limit]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut).rstrip()


def write_corpus(root: Path, docs: Sequence[dict[str, Any]], namespace: str) -> dict[str, str]:
    """Write each document as a canonical v2 record; returns memory id -> dataset id."""
    ids: dict[str, str] = {}
    stamp = "2026-01-01T00:00:00Z"
    settled = time.time_ns() - 3600 * 1_000_000_000
    for doc in docs:
        # Derived from the dataset id, so every run ranks exactly the same records and
        # paths (ids are part of the indexed path terms) and figures are reproducible.
        memory_id = "mem_" + hashlib.sha256(f"{namespace}:{doc['id']}".encode()).hexdigest()[:32]
        title = _text(doc.get("title") or "", TITLE_MAX) or None
        record = MemoryRecordV2(
            id=memory_id,
            scope=Scope.KNOWLEDGE,
            namespace=Namespace("topic", namespace, None),
            collection=None,
            kind="reference",
            language="en",
            title=title,
            content=_text(doc["content"], CONTENT_MAX),
            tags=(),
            provenance=Provenance("explicit_user_statement", "memory_remember"),
            lifecycle=Lifecycle("active", 1),
            created_at=stamp,
            updated_at=stamp,
        )
        parts = reference_parts(V2Reference(Scope.KNOWLEDGE, namespace, None, memory_id))
        path = root.joinpath(*parts)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        path.write_bytes(serialize_record(record))
        # Backdated like an old file (quality does not depend on the stamps' trust).
        os.utime(path, ns=(settled, settled))
        ids[memory_id] = str(doc["id"])
    return ids


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50": statistics.median(ordered),
        "p95": ordered[max(0, int(len(ordered) * 0.95) - 1)],
    }


def _arguments(query: dict[str, Any]) -> dict[str, Any]:
    arguments: dict[str, Any] = {"query": query["query"], "scope": "knowledge"}
    if query.get("tags"):
        arguments["tags"] = query["tags"]
    return arguments


def run_in_process(
    root: Path, queries: Sequence[dict[str, Any]], ids: Mapping[str, str]
) -> tuple[dict[str, list[str]], list[float]]:
    service = MemoryService(lambda: root, 1_000_000, CursorCodec.generate())
    service.recall({"query": "warm up", "scope": "knowledge"})  # first call builds the index
    run: dict[str, list[str]] = {}
    samples: list[float] = []
    for query in queries:
        started = time.perf_counter()
        outcome = service.recall(_arguments(query))
        samples.append((time.perf_counter() - started) * 1000)
        if outcome.is_error:
            raise SystemExit(f"recall failed: {outcome.payload}")
        run[str(query["id"])] = [ids[item["id"]] for item in outcome.payload["memories"]]
    return run, samples


def run_reference(
    root: Path, queries: Sequence[dict[str, Any]], ids: Mapping[str, str]
) -> tuple[dict[str, list[str]], list[float]]:
    records = load_records(root / Scope.KNOWLEDGE.value)
    run: dict[str, list[str]] = {}
    samples: list[float] = []
    for query in queries:
        started = time.perf_counter()
        hits = reference_rank(query["query"], query.get("tags") or (), records)
        samples.append((time.perf_counter() - started) * 1000)
        run[str(query["id"])] = [ids[hit.id] for hit in hits]
    return run, samples


def run_over_http(
    client: McpClient, queries: Sequence[dict[str, Any]], ids: Mapping[str, str]
) -> tuple[dict[str, list[str]], list[float]]:
    client.tool("memory_recall", {"query": "warm up", "scope": "knowledge"})
    run: dict[str, list[str]] = {}
    samples: list[float] = []
    for query in queries:
        started = time.perf_counter()
        payload = client.tool("memory_recall", _arguments(query))
        samples.append((time.perf_counter() - started) * 1000)
        run[str(query["id"])] = [ids[item["id"]] for item in payload["memories"]]
    return run, samples


def _repeat(
    measure: Callable[[], tuple[dict[str, list[str]], list[float]]], rounds: int
) -> tuple[dict[str, list[str]], list[float]]:
    run, samples = measure()
    for _ in range(rounds - 1):
        again, more = measure()
        if again != run:
            raise SystemExit("rankings differ between repeated runs")
        samples += more
    return run, samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", nargs="?", type=Path, default=DEFAULT_DATASET)
    parser.add_argument("--namespace", default="scifact")
    parser.add_argument("--latency-records", type=int, default=1000)
    parser.add_argument("--latency-rounds", type=int, default=2)
    args = parser.parse_args()
    dataset: Path = args.dataset.resolve()
    scorer = _load_score_module(dataset)
    docs = _jsonl(dataset / "corpus.jsonl")
    queries = _jsonl(dataset / "queries.jsonl")
    qrels = scorer.load_qrels(str(dataset))

    Latency = dict[str, float] | None
    rows: list[tuple[str, dict[str, float], Latency, Latency]] = []
    with tempfile.TemporaryDirectory(prefix="mymcp-recall-") as tmp:
        root = Path(tmp) / "memory"
        started = time.perf_counter()
        ids = write_corpus(root, docs, args.namespace)
        print(f"wrote {len(ids)} records in {time.perf_counter() - started:.1f}s")
        default_run, default_ms = run_in_process(root, queries, ids)
        reference_run, _ = run_reference(root, queries, ids)
        with mcp_server(root) as client:
            http_run, http_ms = run_over_http(client, queries, ids)
        if http_run != default_run:
            differing = sum(http_run[q] != default_run[q] for q in default_run)
            raise SystemExit(f"HTTP and in-process rankings differ for {differing} queries")
        print(f"HTTP rankings identical to in-process for all {len(queries)} queries")
        rows.append(("default (BM25F)", scorer.score(qrels, default_run), _percentiles(default_ms),
                     _percentiles(http_ms)))  # fmt: skip
        # No latency for the yardstick: it re-tokenises every record on every query.
        rows.append(("reference_rank", scorer.score(qrels, reference_run), None, None))

    with tempfile.TemporaryDirectory(prefix="mymcp-recall-") as tmp:
        root = Path(tmp) / "memory"
        ids = write_corpus(root, docs[: args.latency_records], args.namespace)
        with mcp_server(root) as client:
            _, small_http = _repeat(
                lambda: run_over_http(client, queries, ids), args.latency_rounds
            )
        _, small_local = _repeat(lambda: run_in_process(root, queries, ids), args.latency_rounds)

    print()
    print(f"dataset {dataset} ({len(docs)} records, {len(queries)} queries, at most 5 results)")
    print(f"{'ranking':18} {'R@5':>7} {'MRR@5':>7} {'nDCG@5':>7}  in-process p50/p95 ms  "
          "HTTP p50/p95 ms")  # fmt: skip
    for name, quality, local, remote in rows:
        http_text = f"{remote['p50']:6.2f} / {remote['p95']:6.2f}" if remote else "     -"
        local_text = f"{local['p50']:8.2f} / {local['p95']:6.2f}" if local else "       -         "
        print(
            f"{name:18} {quality['R@5']:7.4f} {quality['MRR@10']:7.4f} {quality['nDCG@10']:7.4f}"
            f"  {local_text}     {http_text}"
        )
    local_p, remote_p = _percentiles(small_local), _percentiles(small_http)
    print(
        f"latency at {len(ids)} records (default ranking, {len(small_http)} calls): "
        f"in-process p50 {local_p['p50']:.2f} ms p95 {local_p['p95']:.2f} ms; "
        f"HTTP p50 {remote_p['p50']:.2f} ms p95 {remote_p['p95']:.2f} ms"
    )


if __name__ == "__main__":
    main()
