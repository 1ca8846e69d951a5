"""Schema-aware repair of tool arguments that a client sent as stringified JSON.

Some clients (and small local models) stringify nested arguments: `"tags": "[\"a\"]"`.
Where a property's schema forbids strings, one layer of JSON is decoded with the strict
bounded decoder, and the decoded value is kept only if its JSON type is one the schema
allows. A string that does not decode (too deep, too large, not strict JSON) stays a
string, so the schema check that follows answers it with the tool's normal validation
error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mymcp._strictjson import StrictJsonError, load_strict_json

__all__ = ["decode_stringified_arguments"]

_MAX_DECODE_LENGTH = 1 << 20


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _allowed_types(schema: object) -> frozenset[str] | None:
    """JSON types a schema admits, or None when it does not say (then leave values alone)."""
    if not isinstance(schema, Mapping):
        return None
    declared = schema.get("type")
    if isinstance(declared, str):
        return frozenset({declared})
    if isinstance(declared, list) and all(isinstance(t, str) for t in declared):
        return frozenset(declared)
    if "const" in schema:
        return frozenset({_json_type(schema["const"])})
    if isinstance(schema.get("enum"), list):
        return frozenset(_json_type(v) for v in schema["enum"])
    for combinator in ("oneOf", "anyOf"):
        branches = schema.get(combinator)
        if isinstance(branches, list) and branches:
            union: set[str] = set()
            for branch in branches:
                types = _allowed_types(branch)
                if types is None:
                    return None
                union |= types
            return frozenset(union)
    return None


def _admits(types: frozenset[str], value: object) -> bool:
    kind = _json_type(value)
    return kind in types or (kind == "integer" and "number" in types)


def decode_stringified_arguments(
    arguments: dict[str, Any], input_schema: Mapping[str, Any]
) -> dict[str, Any]:
    """A copy of `arguments` with one layer of stringified JSON decoded where it helps."""
    properties = input_schema.get("properties")
    if not isinstance(properties, Mapping):
        return arguments
    repaired = arguments
    for name, value in arguments.items():
        if not isinstance(value, str):
            continue
        types = _allowed_types(properties.get(name))
        if types is None or "string" in types:
            continue
        try:
            decoded = load_strict_json(value, max_bytes=_MAX_DECODE_LENGTH, unicode_text=True)
        except StrictJsonError:
            continue
        if _admits(types, decoded):
            if repaired is arguments:
                repaired = dict(arguments)
            repaired[name] = decoded
    return repaired
