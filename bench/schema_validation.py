"""Argument validation cost and correctness: jsonschema-rs against fastjsonschema.

Both compile the schemas the host really publishes (the memory tools, the example plugin,
the conformance fixture) once, then validate typical valid arguments many times; the
fastest of several rounds is the per-call cost (other load on the machine only ever
slows a round down). A second table runs 2020-12 cases our
schemas use or that external plugins may use, and records which validator gets each
right. Last, the host's own per-call check (`ArgumentsValidator.check`, what `tools/call`
runs) is timed on the memory tools.

    pip install fastjsonschema   # measured only here, not a dependency
    python bench/schema_validation.py [--calls 20000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples" / "example_plugin"))

import fastjsonschema  # noqa: E402
import jsonschema_rs  # noqa: E402
import mymcp_example_plugin  # noqa: E402

from mymcp.plugins.mnemosyne.memory import tool_definitions  # noqa: E402
from mymcp.runtime import compile_input_schema  # noqa: E402
from tests.conformance_fixture.mymcp_conformance_fixture import (  # noqa: E402
    JSON_SCHEMA_2020_12_INPUT,
)

REFERENCE = {
    "schema_version": 2,
    "scope": "project",
    "namespace_id": "mymcp",
    "collection_id": None,
    "id": "mem_" + "0123456789abcdef" * 2,
}
REMEMBER = {
    "scope": "project",
    "namespace": {"kind": "project", "id": "mymcp", "label": "MyMCP"},
    "collection": None,
    "kind": "decision",
    "language": "en",
    "title": "One cache per scan",
    "content": "We keep one derived cache per scan result and patch it with changed records. " * 6,
    "tags": ["cache", "index", "performance"],
    "origin": "explicit_user_statement",
}
MEMORY_CALLS: dict[str, dict[str, Any]] = {
    "memory_recall": {"query": "what did we decide about caching", "scope": "project"},
    "memory_list": {"scope": "project", "namespace_id": "mymcp", "page_size": 20},
    "memory_inspect": {"reference": REFERENCE},
    "memory_archive": {"reference": REFERENCE, "expected_revision": 3},
    "memory_remember": REMEMBER,
    "memory_revise": {
        "reference": REFERENCE,
        "expected_revision": 3,
        "namespace_label": None,
        "title": "One cache per scan",
        "content": REMEMBER["content"],
        "tags": ["cache"],
    },
}

# (description, schema, instance, valid under Draft 2020-12)
CORRECTNESS: list[tuple[str, dict[str, Any], Any, bool]] = [
    (
        "pattern is not anchored by a trailing newline",
        {"type": "string", "pattern": "^mem_[0-9a-f]{4}$"},
        "mem_abcd\n",
        False,
    ),
    ("true is not an integer", {"type": "integer"}, True, False),
    ("1.0 is an integer", {"type": "integer"}, 1.0, True),
    (
        "prefixItems",
        {"type": "array", "prefixItems": [{"type": "integer"}]},
        ["not an integer"],
        False,
    ),
    ("dependentRequired", {"type": "object", "dependentRequired": {"a": ["b"]}}, {"a": 1}, False),
    ("unevaluatedProperties", {"type": "object", "unevaluatedProperties": False}, {"a": 1}, False),
    (
        "$ref into $defs with $anchor (conformance fixture)",
        JSON_SCHEMA_2020_12_INPUT,
        {"email": "e", "address": {"city": 5}},
        False,
    ),
    (
        "if/then/else (conformance fixture)",
        JSON_SCHEMA_2020_12_INPUT,
        {"contactMethod": "phone", "email": "e"},
        False,
    ),
]


def _per_call_us(call: Callable[[], object], calls: int, rounds: int) -> float:
    timings = []
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(calls):
            call()
        timings.append((time.perf_counter() - started) / calls * 1e6)
    return min(timings)


def _fast_valid(validate: Callable[[Any], Any], instance: Any) -> bool:
    try:
        validate(instance)
    except fastjsonschema.JsonSchemaException:
        return False
    return True


def _cases() -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    definitions = tool_definitions()
    cases = {name: (definitions[name]["inputSchema"], args) for name, args in MEMORY_CALLS.items()}
    for activated in mymcp_example_plugin.mymcp_plugin_v1().contribution.tools:
        name = f"example {activated.capability.local_id}"
        cases[name] = (activated.tool["inputSchema"], {"text": "one two three"})
    cases["conformance json_schema_2020_12"] = (
        JSON_SCHEMA_2020_12_INPUT,
        {"name": "n", "contactMethod": "email", "email": "e", "address": {"city": "c"}},
    )
    return cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    print(f"{'schema':34} {'jsonschema-rs us':>17} {'fastjsonschema us':>18} {'ratio':>7}")
    for name, (schema, instance) in _cases().items():
        rust = jsonschema_rs.Draft202012Validator(schema, offline=True)
        fast = fastjsonschema.compile(schema)
        assert rust.is_valid(instance), name
        assert _fast_valid(fast, instance), name
        rust_us = _per_call_us(lambda r=rust, i=instance: r.is_valid(i), args.calls, args.rounds)
        fast_us = _per_call_us(lambda f=fast, i=instance: f(i), args.calls, args.rounds)
        print(f"{name:34} {rust_us:17.2f} {fast_us:18.2f} {fast_us / rust_us:6.1f}x")

    print()
    print(f"{'Draft 2020-12 case':52} {'jsonschema-rs':>14} {'fastjsonschema':>15}")
    for description, schema, instance, expected in CORRECTNESS:
        rust_ok = jsonschema_rs.Draft202012Validator(schema).is_valid(instance) == expected
        fast_ok = _fast_valid(fastjsonschema.compile(schema), instance) == expected
        verdict = {True: "right", False: "WRONG"}
        print(f"{description:52} {verdict[rust_ok]:>14} {verdict[fast_ok]:>15}")

    print()
    print(f"{'host check (tools/call), valid call':34} {'us per call':>12}")
    definitions = tool_definitions()
    for name, instance in MEMORY_CALLS.items():
        validator, _ = compile_input_schema(definitions[name]["inputSchema"])
        assert validator is not None
        assert validator.check(instance) is None, name
        us = _per_call_us(lambda v=validator, i=instance: v.check(i), args.calls, args.rounds)
        print(f"{name:34} {us:12.2f}")
    # A refused call also describes its violation (field, rule, message).
    remember, _ = compile_input_schema(definitions["memory_remember"]["inputSchema"])
    assert remember is not None
    refused = {key: value for key, value in REMEMBER.items() if key != "origin"}
    assert remember.check(refused) is not None
    calls = max(args.calls // 10, 1)
    us = _per_call_us(lambda: remember.check(refused), calls, args.rounds)
    print(f"{'memory_remember, origin missing':34} {us:12.2f}")


if __name__ == "__main__":
    main()
