"""`bench/http_overhead.py` end to end with a handful of requests: every case runs
against real servers and the table prints, so a broken bench fails here, not on the
day someone measures with it."""

from __future__ import annotations

import subprocess
import sys
from fractions import Fraction
from math import comb
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench" / "http_overhead.py"
CASES = (
    "starlette echo",
    "mymcp tools/call list_tools",
    "mymcp stateless tools/call list_tools",
    "mymcp ping",
    "mymcp governed tools/call list_tools",
)

pytestmark = pytest.mark.slow


def _bench(*arguments: str, script: Path = BENCH) -> subprocess.CompletedProcess[str]:
    """Run a bench script (`http_overhead.py` unless told) with `arguments`; it must
    succeed."""
    done = subprocess.run(
        [sys.executable, str(script), *arguments],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_the_bench_runs_every_case_in_both_modes() -> None:
    done = _bench("--requests", "16", "--rounds", "1", "--mode", "both")
    lines = done.stdout.splitlines()
    table = [line.split("  ")[0] for line in lines[1:] if not line.startswith("governed vs")]
    # In the table's order, each case with 1 and with 8 connections.
    assert table == [f"{case} ({n} conn)" for case in CASES for n in (1, 8)]
    assert [line.split(":")[0] for line in lines if line.startswith("governed vs")] == [
        "governed vs audit-off (1 conn)",
        "governed vs audit-off (8 conn)",
    ]


def _http_overhead() -> ModuleType:
    sys.path.insert(0, str(BENCH.parent))
    try:
        import http_overhead
    finally:
        sys.path.remove(str(BENCH.parent))
    return http_overhead


def test_a_case_missing_from_the_table_order_sorts_last() -> None:
    http_overhead = _http_overhead()
    names = ["mymcp new case (8 conn)", "mymcp ping (8 conn)", "starlette echo (8 conn)"]
    assert sorted(names, key=http_overhead._table_position) == [
        "starlette echo (8 conn)",
        "mymcp ping (8 conn)",
        "mymcp new case (8 conn)",
    ]


@pytest.mark.parametrize("count", [1, 5, 6, 9, 20, 40, 41, 200])
def test_the_median_interval_is_the_widest_order_statistics_pair_with_95_percent(
    count: int,
) -> None:
    values = [float(rank) for rank in range(count, 0, -1)]  # order must not matter
    low, high = _http_overhead().median_interval(values)
    k = int(low)  # the values are their own ranks, from 1
    assert high == count - k + 1

    # Coverage of [x(k), x(n-k+1)] is 1 - 2 P(Binomial(n, 1/2) < k), counted exactly.
    def below(rank: int) -> Fraction:
        return Fraction(sum(comb(count, j) for j in range(rank)), 2**count)

    if count < 6:
        assert (low, high) == (1.0, float(count))  # no pair reaches 95 %
        return
    assert 1 - 2 * below(k) >= Fraction(95, 100)  # it covers
    assert 1 - 2 * below(k + 1) < Fraction(95, 100)  # and no narrower pair would


def test_the_paired_governance_comparison_runs() -> None:
    done = _bench("--governance", "2", "--requests", "64")
    assert done.stdout.startswith("governed vs audit-off (8 conn, 2 paired blocks of 64): median ")


def test_the_paired_era_comparison_runs() -> None:
    done = _bench("--eras", "2", "--requests", "64")
    assert done.stdout.startswith("stateless vs session (8 conn, 2 paired blocks of 64): median ")


def test_the_paired_conversation_comparison_runs() -> None:
    # Each conversation checks every reply's status (200, 202, 204) and the session id
    # the handshake era's `initialize` returns, or the bench stops with an error.
    done = _bench("--conversations", "2", "--requests", "32")
    assert done.stdout.startswith(
        "stateless vs handshake conversations (8 conn, 2 paired blocks of 32): median "
    )
    assert "x conversations/s" in done.stdout
    assert "x cpu/conversation" in done.stdout


APP_CPU = REPO / "bench" / "app_cpu.py"


def test_the_in_process_bench_times_every_case() -> None:
    done = _bench("--requests", "8", "--rounds", "1", script=APP_CPU)
    cases = [line.split("  ")[0] for line in done.stdout.splitlines()]
    assert cases == [
        "tools/call list_tools",
        "stateless tools/call",
        "ping",
        "governed tools/call",
        "governed vs audit-off",
    ]


@pytest.mark.parametrize("case", ["tools/call list_tools", "stateless tools/call", "ping"])
def test_what_the_instruction_count_runs_is_served(case: str) -> None:
    # `--instructions` runs exactly this under callgrind; a case that is not served
    # (any status but 200) fails it.
    _bench("--repeat", case, "--requests", "4", script=APP_CPU)


def test_the_result_check_bench_times_every_result() -> None:
    done = _bench("--calls", "2", "--rounds", "1", script=REPO / "bench" / "result_check.py")
    names = [line.rsplit(" ", 2)[0].strip() for line in done.stdout.splitlines()]
    assert names == [
        "one text block",
        "text and small structured content",
        "100 records of 5 fields",
        "one 64 KiB text block",
    ]
