"""Write-path benchmark: ``memory_remember`` latency over HTTP by the size of the scope.

For each size (default 1,000, 10,000 and 100,000 existing records) a temporary memory root is
seeded like ``memory_read.py`` does (canonical v2 records in ``knowledge``/``bench``,
written with ``serialize_record`` at their ``reference_parts`` path). A real
``python -m mymcp.cli`` server is started with ``MNEMOSYNE_MEMORY_REMEMBER_ENABLED=true``
and a candidate limit above the final record count, and one keep-alive HTTP/1.1
connection sends sequential ``tools/call memory_remember`` requests into the same
namespace, so every call's duplicate scan covers the whole seeded container:

* remembered: a new record each call (duplicate scan, temp file, fsync, link, directory
  fsync);
* already_exists: an exact duplicate of an existing record (the scan without a write).

The first remember of each server (which builds the index) is reported as "cold".
Prints p50/p95 in milliseconds and checks the files on disk afterwards.

    python bench/memory_write.py [--sizes 1000,10000,100000] [--calls 200]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from memory_read import (
    NAMESPACE,
    SCOPE,
    McpClient,
    percentiles,
    sandbox_directory,
    seed_root,
    server,
    timed,
    zipf_words,
)

GATES = {
    "MNEMOSYNE_MEMORY_REMEMBER_ENABLED": "true",
    "MNEMOSYNE_MEMORY_CANDIDATE_LIMIT": "1000000",
}


def _arguments(title: str, content: str, tags: list[str]) -> dict[str, Any]:
    return {
        "scope": SCOPE.value,
        "namespace": {"kind": "topic", "id": NAMESPACE, "label": "Benchmark"},
        "collection": None,
        "kind": "reference",
        "language": "en",
        "title": title,
        "content": content,
        "tags": tags,
        "origin": "explicit_user_statement",
    }


def _remember(client: McpClient, arguments: dict[str, Any], status: str) -> float:
    elapsed, result = timed(client, "memory_remember", arguments)
    if result["status"] != status:
        raise SystemExit(f"expected {status}: {result}")
    return elapsed


def measure(size: int, calls: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="mymcp-memory-write-") as tmp:
        root = Path(tmp) / "memory"
        started = time.perf_counter()
        words = seed_root(root, size)
        seeded_s = time.perf_counter() - started
        rng = random.Random(size)
        fresh = [
            _arguments(
                " ".join(zipf_words(rng, words, 5)).capitalize(),
                f"Benchmark note {number}: " + " ".join(zipf_words(rng, words, 60)) + ".",
                list(dict.fromkeys(zipf_words(rng, words, 2))),
            )
            for number in range(calls + 1)
        ]
        row: dict[str, Any] = {"records": size, "seed_s": seeded_s}
        with sandbox_directory() as sandbox, server(sandbox, root, GATES) as (client, _):
            row["cold"] = _remember(client, fresh[0], "remembered")
            created = [_remember(client, arguments, "remembered") for arguments in fresh[1:]]
            duplicates = [
                _remember(client, fresh[rng.randrange(len(fresh))], "already_exists")
                for _ in range(calls)
            ]
        on_disk = sum(1 for _ in root.joinpath(SCOPE.value, NAMESPACE).glob("*.json"))
        if on_disk != size + calls + 1:
            raise SystemExit(f"{on_disk} records on disk, expected {size + calls + 1}")
        leftovers = list(root.rglob("*.tmp"))
        if leftovers:
            raise SystemExit(f"{len(leftovers)} temp files left behind")
        row.update(created=percentiles(created), duplicates=percentiles(duplicates))
        return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    rows = []
    for size in (int(size) for size in args.sizes.split(",")):
        row = measure(size, args.calls)
        print(
            f"{size} records: seeded in {row['seed_s']:.1f}s; cold remember {row['cold']:.1f} ms",
            flush=True,
        )
        rows.append(row)
    print()
    print(f"HTTP keep-alive, sequential, {args.calls} calls per column; ms p50 / p95")
    print(f"{'existing':>8}  {'remembered':>15}  {'already_exists':>15}")
    for row in rows:
        created, duplicates = row["created"], row["duplicates"]
        print(
            f"{row['records']:>8}  {created[0]:6.2f} / {created[1]:6.2f}  "
            f"{duplicates[0]:6.2f} / {duplicates[1]:6.2f}"
        )


if __name__ == "__main__":
    main()
