"""The host's check of plugin results, against the official Python SDK's own reading.

Whatever result the host lets through must be one the SDK's `CallToolResult` accepts:
otherwise the client refuses the whole reply instead of getting a clear tool error. The
host may refuse more than the SDK does (it refuses, say, a null where a member is
optional); it must never let through less.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from mcp.types import CallToolResult
from pydantic import ValidationError

from mymcp.runtime import compose_runtime
from mymcp.transport._results import checked_result
from tests.synthetic import contribution, external_bindings, tool

_PLUGIN = contribution("oracle", tool("oracle", "any"))
_TOOL = compose_runtime([_PLUGIN], external_bindings(_PLUGIN), server_version="0.1.0").registry.get(
    "oracle__any"
)

# Values a plugin might put in any member: right for some members, wrong for others.
_SCALARS = st.sampled_from(
    [None, True, 0, 3, -1, 0.5, 2.5, "", "x", "user", "assistant", "light", "dark", "aGk="]
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(
            st.sampled_from(
                ["src", "uri", "text", "blob", "mimeType", "sizes", "theme", "audience", "x"]
            ),
            inner,
            max_size=3,
        ),
    ),
    max_leaves=6,
)
_MEMBERS = [
    "text",
    "data",
    "mimeType",
    "uri",
    "name",
    "title",
    "description",
    "size",
    "icons",
    "resource",
    "annotations",
    "_meta",
    "audience",
    "priority",
    "lastModified",
]


# A block each kind accepts; the strategy then changes or adds a few members, so most
# examples are one member away from a good block, where a missed check hides.
_BASES: dict[str, dict[str, Any]] = {
    "text": {"text": "x"},
    "image": {"data": "aGk=", "mimeType": "image/png"},
    "audio": {"data": "aGk=", "mimeType": "audio/wav"},
    "resource_link": {"uri": "x:1", "name": "x"},
    "resource": {"resource": {"uri": "x:1", "text": "x"}},
}


@st.composite
def _blocks(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(sorted(_BASES)))
    block: dict[str, Any] = {"type": kind, **_BASES[kind]}
    for member in draw(st.lists(st.sampled_from(_MEMBERS), max_size=2, unique=True)):
        block[member] = draw(_near(member))
    return block


def _objects(*members: str) -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(st.sampled_from(members), _VALUES, max_size=len(members))


def _near(member: str) -> st.SearchStrategy[Any]:
    """Values for `member`: mostly of its own shape (objects with its own member names,
    which is where a shallow check misses a wrong value), sometimes anything at all."""
    shaped = {
        "icons": st.lists(_objects("src", "mimeType", "sizes", "theme"), max_size=2),
        "annotations": _objects("audience", "priority", "lastModified"),
        "resource": _objects("uri", "text", "blob", "mimeType", "_meta"),
    }.get(member)
    return _VALUES if shaped is None else st.one_of(shaped, _VALUES)


@st.composite
def _results(draw: st.DrawFn) -> dict[str, Any]:
    result: dict[str, Any] = {"content": draw(st.lists(_blocks(), max_size=3))}
    for member in ("isError", "structuredContent", "_meta"):
        if draw(st.booleans()):
            result[member] = draw(_VALUES)
    return result


def _reaches_clients(result: dict[str, Any]) -> bool:
    return isinstance(checked_result(_TOOL, result), dict)


@settings(max_examples=400)
@given(_results())
def test_every_result_the_host_lets_through_is_one_the_sdk_reads(result: dict[str, Any]) -> None:
    if _reaches_clients(result):
        try:
            CallToolResult.model_validate(result)
        except ValidationError as exc:  # pragma: no cover - the failure being looked for
            raise AssertionError(f"let through, but the SDK refuses it: {exc}") from None


def test_the_oracle_sees_both_sides() -> None:
    # The property above means something only if both answers occur.
    good = {"content": [{"type": "text", "text": "x"}]}
    bad = {"content": [{"type": "resource_link", "uri": "x", "name": "x", "icons": [{"src": 5}]}]}
    assert _reaches_clients(good)
    CallToolResult.model_validate(good)
    assert not _reaches_clients(bad)
