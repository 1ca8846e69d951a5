"""Read-path benchmark: ``memory_recall`` and ``memory_list`` over HTTP by root size.

For each size (default 100, 1,000, 10,000 and 100,000 records) a temporary memory root
is seeded with canonical version-2 records in one scope and namespace
(``knowledge``/``bench``), written exactly as the plugin writes them (``serialize_record``
at the ``reference_parts`` path, backdated, then left alone for the index's settle time
so it may trust their stamps). A real ``python -m mymcp.cli`` server is started on a
free loopback port in a temporary HOME/XDG sandbox with ``MNEMOSYNE_MEMORY_ROOT``
pointing at the root, and one keep-alive HTTP/1.1 connection sends ``initialize`` and
then sequential ``tools/call`` requests:

* recall: 3-word queries drawn from the corpus vocabulary (scope-wide);
* list, first page: ``{"scope": "knowledge"}`` (page size 50);
* list, next page: the same selector with the cursor the first page returned.

Also reported, per size:

* cold: the first recall of a server that never saw the root (it reads every file);
* warm: the first recall after a restart of the server with the same HOME, so with the
  index snapshot the first server saved on its way out (every file is stat'ed, none
  re-read);
* RSS per record: the server's resident memory after its first recall minus its
  resident memory before any memory call, divided by the number of records; "at end"
  is the same after all the recalls and list pages (with the caches they filled).

Prints p50/p95 per operation in milliseconds. With ``--hard-link``, one record file also
gets a second name outside the root (as a backup made with hard links gives every file),
whose writes would raise no change event in the directories the index watches.

    python bench/memory_read.py [--sizes 100,1000,10000,100000] [--calls 300] [--list-calls 100]
    python bench/memory_read.py --sizes 10000 --hard-link
"""

from __future__ import annotations

import argparse
import math
import os
import random
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mcp_client import PROTOCOL, McpClient  # noqa: E402

from mymcp.plugins.mnemosyne.memory import (  # noqa: E402
    Lifecycle,
    MemoryRecordV2,
    Namespace,
    Provenance,
    Scope,
    V2Reference,
    reference_parts,
    serialize_record,
)
from tests.e2e.server import RunningServer, Sandbox, serve  # noqa: E402

SCOPE = Scope.KNOWLEDGE
NAMESPACE = "bench"
SETTLED_AGE_NS = 3600 * 1_000_000_000
SETTLE_SECONDS = 2.5


def vocabulary(size: int = 3000, seed: int = 7) -> list[str]:
    """Pronounceable pseudo-words, so the ranking sees a natural-ish term distribution."""
    rng = random.Random(seed)
    consonants, vowels = "bcdfghklmnprstvz", "aeiou"
    words: set[str] = set()
    while len(words) < size:
        syllables = rng.randint(2, 4)
        words.add("".join(rng.choice(consonants) + rng.choice(vowels) for _ in range(syllables)))
    return sorted(words)


def zipf_words(rng: random.Random, words: list[str], count: int) -> list[str]:
    # Rank-skewed choice: a few words are common, most are rare.
    return [words[min(len(words) - 1, int(rng.paretovariate(1.1)) - 1)] for _ in range(count)]


def seed_root(root: Path, count: int, *, seed: int = 11) -> list[str]:
    """Write ``count`` canonical records into ``knowledge/bench``; returns the word list."""
    rng = random.Random(seed)
    words = vocabulary()
    rng.shuffle(words)
    stamp = "2026-01-01T00:00:00Z"
    settled = time.time_ns() - SETTLED_AGE_NS
    directory = root.joinpath(SCOPE.value, NAMESPACE)
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    for _ in range(count):
        memory_id = "mem_" + uuid.uuid4().hex
        tags = tuple(dict.fromkeys(zipf_words(rng, words, rng.randint(0, 3))))
        record = MemoryRecordV2(
            id=memory_id,
            scope=SCOPE,
            namespace=Namespace("topic", NAMESPACE, "Benchmark"),
            collection=None,
            kind="reference",
            language="en",
            title=" ".join(zipf_words(rng, words, rng.randint(3, 8))).capitalize(),
            content=" ".join(zipf_words(rng, words, rng.randint(30, 120))) + ".",
            tags=tags,
            provenance=Provenance("explicit_user_statement", "memory_remember"),
            lifecycle=Lifecycle("active", 1),
            created_at=stamp,
            updated_at=stamp,
        )
        parts = reference_parts(V2Reference(SCOPE, NAMESPACE, None, memory_id))
        path = root.joinpath(*parts)
        path.write_bytes(serialize_record(record))
        os.utime(path, ns=(settled, settled))
    # The index trusts a stamp only once the file's ctime is old enough too, as the files
    # of a real root are: give the last ones written that long.
    time.sleep(SETTLE_SECONDS)
    return words


def percentiles(samples: list[float]) -> tuple[float, float]:
    """Nearest-rank p50 and p95 of the samples (milliseconds)."""
    ordered = sorted(samples)

    def rank(fraction: float) -> float:
        return ordered[max(0, math.ceil(len(ordered) * fraction) - 1)]

    return rank(0.50), rank(0.95)


def timed(client: McpClient, name: str, arguments: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    started = time.perf_counter()
    result = client.tool(name, arguments)
    elapsed = (time.perf_counter() - started) * 1000
    if result.get("status") not in ("ok", "no_matches", "remembered", "already_exists"):
        raise SystemExit(f"{name} failed: {result}")
    return elapsed, result


def resident_bytes(pid: int) -> int:
    """The resident set size of a process (Linux)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise SystemExit("no VmRSS")


@contextmanager
def server(
    sandbox: Sandbox, root: Path, extra_env: Mapping[str, str] | None = None
) -> Iterator[tuple[McpClient, RunningServer]]:
    """A real server over ``root`` in a sandbox that outlives it (HOME keeps its cache)."""
    environment = {"MNEMOSYNE_MEMORY_ROOT": str(root), **(extra_env or {})}
    with serve(sandbox, environment) as running:
        client = McpClient(running.port)
        try:
            client.request(
                "initialize",
                {
                    "protocolVersion": PROTOCOL,
                    "capabilities": {},
                    "clientInfo": {"name": "bench", "version": "0"},
                },
            )
            client.request("notifications/initialized")
            yield client, running
        finally:
            client.close()


@contextmanager
def sandbox_directory() -> Iterator[Sandbox]:
    with tempfile.TemporaryDirectory(prefix="mymcp-bench-") as tmp:
        sandbox = Sandbox(Path(tmp))
        sandbox.home.mkdir(mode=0o700)
        sandbox.write_config("schema_version = 1\n" + sandbox.server_table())
        yield sandbox


def measure(size: int, calls: int, list_calls: int, *, hard_link: bool = False) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="mymcp-memory-read-") as tmp:
        root = Path(tmp) / "memory"
        started = time.perf_counter()
        words = seed_root(root, size)
        seeded_s = time.perf_counter() - started
        if hard_link:
            first = next(root.joinpath(SCOPE.value, NAMESPACE).glob("*.json"))
            os.link(first, Path(tmp) / "backup.json")
        rng = random.Random(size)
        queries = [" ".join(zipf_words(rng, words, 3)) for _ in range(calls)]
        row: dict[str, Any] = {"records": size, "seed_s": seeded_s}
        with sandbox_directory() as sandbox:
            with server(sandbox, root) as (client, running):
                empty = resident_bytes(running.process.pid)
                row["cold_recall"], _ = timed(
                    client, "memory_recall", {"query": queries[0], "scope": SCOPE.value}
                )
                row["rss_per_record"] = (resident_bytes(running.process.pid) - empty) / size
                row["cold_list"], first = timed(client, "memory_list", {"scope": SCOPE.value})
                if first["page"]["total_count"] != size:
                    raise SystemExit(f"listed {first['page']['total_count']} of {size} records")
                recall: list[float] = []
                matched = 0
                for query in queries:
                    elapsed, result = timed(
                        client, "memory_recall", {"query": query, "scope": SCOPE.value}
                    )
                    recall.append(elapsed)
                    matched += result["status"] == "ok"
                first_pages: list[float] = []
                next_pages: list[float] = []
                for _ in range(list_calls):
                    elapsed, page = timed(client, "memory_list", {"scope": SCOPE.value})
                    first_pages.append(elapsed)
                    cursor = page["page"]["next_cursor"]
                    elapsed, _ = timed(
                        client, "memory_list", {"scope": SCOPE.value, "cursor": cursor}
                    )
                    next_pages.append(elapsed)
                row["rss_end"] = (resident_bytes(running.process.pid) - empty) / size
                # Interrupted, the server saves its index snapshot on its way out.
                running.process.send_signal(signal.SIGINT)
                running.process.wait(timeout=600)
            # Start again over the same root and cache.
            with server(sandbox, root) as (client, _running):
                row["warm_recall"], _ = timed(
                    client, "memory_recall", {"query": queries[1], "scope": SCOPE.value}
                )
                row["warm_list"], _ = timed(client, "memory_list", {"scope": SCOPE.value})
        row.update(
            recall=percentiles(recall),
            list_first=percentiles(first_pages),
            list_next=percentiles(next_pages),
            matched=matched / len(queries),
        )
        return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,10000,100000")
    parser.add_argument("--calls", type=int, default=300, help="recall calls per size")
    parser.add_argument("--list-calls", type=int, default=100, help="list page pairs per size")
    parser.add_argument(
        "--hard-link", action="store_true", help="give one record file a second name"
    )
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    rows = []
    for size in sizes:
        row = measure(size, args.calls, args.list_calls, hard_link=args.hard_link)
        print(
            f"{size} records: seeded in {row['seed_s']:.1f}s; first recall cold "
            f"{row['cold_recall']:.1f} ms, after restart {row['warm_recall']:.1f} ms; first "
            f"list cold {row['cold_list']:.1f} ms, after restart {row['warm_list']:.1f} ms",
            flush=True,
        )
        rows.append(row)
    print()
    print(
        f"HTTP keep-alive, sequential; {args.calls} recalls, {args.list_calls} first and "
        f"{args.list_calls} next list pages per size; ms p50 / p95"
    )
    print(
        f"{'records':>8}  {'recall':>15}  {'list 1st page':>15}  {'list next page':>15}  "
        f"{'cold 1st':>9}  {'warm 1st':>9}  {'RSS/rec':>8}  {'at end':>8}  hits"
    )
    for row in rows:
        cells = [
            f"{row[key][0]:6.2f} / {row[key][1]:6.2f}"
            for key in ("recall", "list_first", "list_next")
        ]
        print(
            f"{row['records']:>8}  {cells[0]:>15}  {cells[1]:>15}  {cells[2]:>15}  "
            f"{row['cold_recall']:9.1f}  {row['warm_recall']:9.1f}  "
            f"{row['rss_per_record'] / 1024:6.2f}kB  {row['rss_end'] / 1024:6.2f}kB  "
            f"{row['matched']:.0%}"
        )


if __name__ == "__main__":
    main()
