"""CPU per external-plugin result of the host's result check, for results of several sizes.

Every result an external plugin's handler returns is checked before it is sent: its
shape (MCP's content blocks), JSON encodability, object keys and depth, and its size.
Since the 2026-12-04 session the check first copies the result into plain dicts and
lists and checks the copy (so a plugin's own object can neither change nor fail after
the check); this measures what that costs against an older checkout:

    python bench/result_check.py
    PYTHONPATH=/path/to/other/checkout python bench/result_check.py   # the other version

The least time over several rounds is printed per result, in microseconds. Run from
the repository root (it builds its tool with the test suite's helpers).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# The helpers live in the checkout; appended, so that PYTHONPATH still decides which
# version of MyMCP is measured.
sys.path.append(str(Path(__file__).resolve().parents[1]))

from mymcp.runtime import BoundTool, compose_runtime
from tests.synthetic import contribution, external_bindings, tool

RESULTS: dict[str, dict[str, Any]] = {
    "one text block": {"content": [{"type": "text", "text": "hello world"}]},
    "text and small structured content": {
        "content": [{"type": "text", "text": "hello world"}],
        "structuredContent": {"echo": "hello world", "count": 3, "tags": ["a", "b"]},
    },
    "100 records of 5 fields": {
        "content": [{"type": "text", "text": "100 records"}],
        "structuredContent": {
            "records": [
                {"id": n, "title": f"record {n}", "score": n / 100, "tags": ["x"], "ok": True}
                for n in range(100)
            ]
        },
    },
    "one 64 KiB text block": {"content": [{"type": "text", "text": "x" * 65536}]},
}


def _checker() -> Callable[[BoundTool, Any], object]:
    """The host's check of one result, in whichever form the checkout has it."""
    from mymcp.transport import _results

    checked = getattr(_results, "checked_result", None)
    if checked is not None:
        return checked  # type: ignore[no-any-return]
    problem = _results.result_problem  # type: ignore[attr-defined]

    def older(bound: BoundTool, result: Any) -> object:  # checked, then copied shallowly
        return problem(bound, result) or dict(result)

    return older


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    plugin = contribution("bench", tool("bench", "echo"))
    runtime = compose_runtime([plugin], external_bindings(plugin), server_version="0.1.0")
    bound = runtime.registry.get("bench__echo")
    assert bound is not None
    check = _checker()
    for name, result in RESULTS.items():
        assert isinstance(check(bound, result), dict), name  # every one is accepted
        best = float("inf")
        for _ in range(args.rounds):
            started = time.process_time()
            for _ in range(args.calls):
                check(bound, result)
            best = min(best, (time.process_time() - started) / args.calls * 1e6)
        print(f"{name:36} {best:9.2f} µs")


if __name__ == "__main__":
    main()
