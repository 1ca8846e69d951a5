"""Per-call cost of governance, in-process: the policy decision and the audit record.

Measured against a baseline taken in the same run: the registry lookup every
`tools/call` already does. Policy: a 20-rule policy over the real memory tools and 20
synthetic plugin tools, decided for a mix of principals (each principal's view is
computed once and cached, as in the server). Audit: keyed digest of the arguments plus
queuing one prepared record (what the request path pays for a read-only call); the
encoding, hashing, batched write and fsync that the background writer does are reported
separately per record. `--calls` sets the policy rounds; the audit rows always queue and
write 20,000 records, one batch the writer commits at once.

    python bench/governance_cost.py [--calls 200000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mymcp.config import parse_host_configuration  # noqa: E402
from mymcp.governance import NUMBER, WORD, AuditLog, Policy, RecordShape  # noqa: E402
from mymcp.runtime import compose_runtime  # noqa: E402
from tests.config.helpers import to_toml  # noqa: E402
from tests.synthetic import DESTRUCTIVE, contribution, external_bindings, tool  # noqa: E402

PRINCIPALS: list[tuple[str, frozenset[str]]] = [
    ("anonymous", frozenset()),
    ("operator:alice", frozenset()),
    *(
        (f"oauth:user{i}", frozenset({"memory.read" if i % 2 else "memory.write"}))
        for i in range(8)
    ),
]
ARGUMENTS = {"scope": "project", "query": "what did we decide about the cache", "tags": ["adr"]}


def twenty_rules() -> dict[str, Any]:
    rules: list[dict[str, Any]] = [
        {"principals": ["anonymous"], "allow": ["@read_only"]},
        {
            "principals": ["operator:alice", "oauth:*"],
            "allow": ["bench__*"],
            "deny": ["bench__tool_0"],
        },
        {"principals": ["scope:memory.write"], "allow": ["@mutating"]},
        {"principals": ["scope:memory.read"], "allow": ["@read_only"]},
    ]
    rules += [
        {"principals": [f"operator:user{i}", f"oauth:user{i}"], "allow": [f"bench__tool_{i}"]}
        for i in range(16)
    ]
    return {"schema_version": 8, "policy": {"default": "deny", "rules": rules}}


def per_call(function: Any, calls: int) -> float:
    started = time.perf_counter()
    function(calls)
    return (time.perf_counter() - started) / calls * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--calls", type=int, default=200_000)
    calls = parser.parse_args().calls
    bench = contribution(
        "bench",
        *(tool("bench", f"tool_{i}", effects=DESTRUCTIVE) for i in range(10)),
        *(tool("bench", f"tool_{i}") for i in range(10, 20)),
    )
    runtime = compose_runtime([bench], external_bindings(bench), server_version="0.1.0")
    settings = parse_host_configuration(to_toml(twenty_rules()).encode()).policy
    assert settings is not None
    assert len(settings.rules) == 20
    policy = Policy(settings, runtime)
    registry = runtime.registry
    names = list(registry.names)
    mix = [
        (name, scopes, names[(3 * i + 1) % len(names)])
        for i, (name, scopes) in enumerate(PRINCIPALS)
    ]
    for name, scopes, _ in mix:
        policy.view(name, scopes)  # each principal's view is built once, then cached

    def baseline(count: int) -> None:
        get = registry.get
        for index in range(count):
            get(mix[index % 10][2])

    def decide(count: int) -> None:
        get, view = registry.get, policy.view
        for index in range(count):
            name, scopes, tool_name = mix[index % 10]
            get(tool_name)
            view(name, scopes).allows(tool_name)

    with tempfile.TemporaryDirectory() as directory:
        audit = AuditLog(Path(directory), max_segment_bytes=8 << 20, max_segments=16)
        # What the dispatcher prepares once per (principal, session, tool): see
        # `Dispatcher._shape`. A read-only call then queues one record of four values.
        shape = RecordShape(
            "tool_call",
            {
                "decision": "allowed",
                "principal": "oauth:user1",
                "session": audit.session_tag("session-id-0123456789"),
                "tool": "bench__tool_12",
            },
            ("args_digest", "duration_ms", "outcome"),
            {"args_digest": WORD, "duration_ms": NUMBER, "outcome": WORD},
        )

        def record(count: int) -> None:
            for _ in range(count):
                values = (audit.digest(ARGUMENTS), 1.234, "ok")
                audit.append_shaped(shape, values)

        base_ns = per_call(baseline, calls)
        decide_ns = per_call(decide, calls)
        record_ns = per_call(record, 20_000)
        started = time.perf_counter()
        audit.commit()  # the 20,000 records queued above, written and fsync'd at once
        write_ns = (time.perf_counter() - started) / 20_000 * 1e9
        audit.close()
    print(
        f"calls: {calls} (audit rows: 20000 records); "
        f"policy: 20 rules over {len(names)} tools; 10 principals"
    )
    print("| measurement | ns per call |")
    print("| --- | --- |")
    print(f"| registry lookup (baseline) | {base_ns:.0f} |")
    print(f"| lookup + policy decision (cached view) | {decide_ns:.0f} |")
    print(f"| policy decision alone | {decide_ns - base_ns:.0f} |")
    print(f"| audit: digest + queue one prepared record (request path) | {record_ns:.0f} |")
    print(f"| audit: encode, hash, batched write + fsync, per record (writer) | {write_ns:.0f} |")


if __name__ == "__main__":
    main()
