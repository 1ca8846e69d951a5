"""Listing selectors, ordering, paging and the HMAC cursor."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mymcp.plugins.mnemosyne.memory import CursorCodec, MemoryService, file_key, tool_definition
from mymcp.plugins.mnemosyne.memory.reads import CursorState

Factory = Callable[..., dict[str, Any]]
Writer = Callable[..., Path]


def _hex_id(n: int) -> str:
    return f"mem_{n:032x}"


@pytest.fixture
def inventory(write: Writer, v1: Factory, v2: Factory) -> dict[str, dict[str, Any]]:
    records = {
        "b_loose": v2(namespace="beta", memory_id=_hex_id(1)),
        "a_coll_z": v2(namespace="alpha", collection="zeta", memory_id=_hex_id(2)),
        "a_coll_c": v2(namespace="alpha", collection="coll", memory_id=_hex_id(3)),
        "a_loose_2": v2(namespace="alpha", memory_id=_hex_id(5), state="archived"),
        "a_loose_1": v2(namespace="alpha", memory_id=_hex_id(4), title=None),
        "a_null": v2(namespace="alpha", collection="null", memory_id=_hex_id(6)),
    }
    for body in records.values():
        write(body)
    write(v1(memory_id="dup", title="Second"), "project/z/dup.json")
    write(v1(memory_id="dup", title="First"), "project/a/dup.json")
    write(v1(memory_id="solo"), "project/solo.json")
    return records


def _refs(payload: dict[str, Any]) -> list[str]:
    return [m["reference"]["id"] for m in payload["memories"]]


def _list(service: MemoryService, **arguments: Any) -> dict[str, Any]:
    outcome = service.list({"scope": "project", **arguments})
    assert not outcome.is_error, outcome.payload
    return outcome.payload


def test_scope_wide_listing_orders_legacy_then_canonical(
    service: MemoryService, inventory: dict[str, dict[str, Any]]
) -> None:
    payload = _list(service)
    expected = ["dup", "dup", "solo"] + [
        inventory[k]["id"]
        for k in ("a_loose_1", "a_loose_2", "a_coll_c", "a_null", "a_coll_z", "b_loose")
    ]
    assert _refs(payload) == expected
    first, second, solo = payload["memories"][:3]
    # Duplicates stay separate items, ordered by their (unexposed) paths.
    assert (first["title"], second["title"]) == ("First", "Second")
    assert first == {
        "reference": {"schema_version": 1, "scope": "project", "id": "dup"},
        "title": "First",
        "inspectability": "ambiguous",
    }
    assert solo["inspectability"] == "exact"
    archived = payload["memories"][4]
    assert archived == {
        "reference": {
            "schema_version": 2,
            "scope": "project",
            "namespace_id": "alpha",
            "collection_id": None,
            "id": inventory["a_loose_2"]["id"],
        },
        "title": "A title",
        "inspectability": "exact",
        "kind": "decision",
        "lifecycle": {"state": "archived"},
    }
    assert payload["page"] == {
        "number": 1,
        "count": 9,
        "total_count": 9,
        "total_pages": 1,
        "truncated": False,
        "next_cursor": None,
    }
    assert all("content" not in item for item in payload["memories"])


def test_namespace_selectors(service: MemoryService, inventory: dict[str, dict[str, Any]]) -> None:
    ids = {k: v["id"] for k, v in inventory.items()}
    everything = _refs(_list(service, namespace_id="alpha"))
    assert everything == [
        ids[k] for k in ("a_loose_1", "a_loose_2", "a_coll_c", "a_null", "a_coll_z")
    ]
    assert _refs(_list(service, namespace_id="alpha", collection_id=None)) == [
        ids["a_loose_1"],
        ids["a_loose_2"],
    ]
    assert _refs(_list(service, namespace_id="alpha", collection_id="coll")) == [ids["a_coll_c"]]
    # The string "null" is a real collection id, not collectionless selection.
    assert _refs(_list(service, namespace_id="alpha", collection_id="null")) == [ids["a_null"]]
    assert _refs(_list(service, namespace_id="gamma")) == []
    assert _refs(_list(service, namespace_id="alpha", collection_id="nope")) == []


def test_empty_inventory_is_ok(service: MemoryService) -> None:
    assert _list(service) == {
        "status": "ok",
        "memories": [],
        "page": {
            "number": 1,
            "count": 0,
            "total_count": 0,
            "total_pages": 1,
            "truncated": False,
            "next_cursor": None,
        },
    }


def test_paging_walks_the_whole_inventory(
    service: MemoryService, inventory: dict[str, dict[str, Any]]
) -> None:
    all_ids = _refs(_list(service))
    seen: list[str] = []
    payload = _list(service, page_size=4)
    numbers = []
    while True:
        seen += _refs(payload)
        numbers.append(payload["page"]["number"])
        assert payload["page"]["total_pages"] == 3
        cursor = payload["page"]["next_cursor"]
        assert payload["page"]["truncated"] is (cursor is not None)
        if cursor is None:
            break
        assert len(cursor) <= 4096
        payload = _list(service, cursor=cursor)
    assert seen == all_ids
    assert numbers == [1, 2, 3]
    assert payload["page"]["count"] == 1


def _first_cursor(service: MemoryService, **selector: Any) -> str:
    cursor = _list(service, page_size=2, **selector)["page"]["next_cursor"]
    assert isinstance(cursor, str)
    return cursor


def _error(service: MemoryService, **arguments: Any) -> tuple[str, str]:
    outcome = service.list({"scope": "project", **arguments})
    assert outcome.is_error
    return outcome.payload["status"], outcome.payload["code"]


STALE = ("conflict", "stale_cursor")
INVALID = ("invalid_request", "invalid_cursor")


def test_cursor_from_another_instance_is_stale(
    root: Path, service: MemoryService, inventory: dict[str, dict[str, Any]]
) -> None:
    other = MemoryService(lambda: root, 10_000, CursorCodec.generate())
    assert _error(other, cursor=_first_cursor(service)) == STALE


def test_processes_sharing_the_cursor_key_page_through_one_listing_together(
    root: Path, tmp_path: Path, inventory: dict[str, dict[str, Any]]
) -> None:
    # Two processes behind one address (a balancer), each with its own index and codec
    # but one cache directory: each accepts the other's cursors; a restart too.
    cache = tmp_path / "cache"
    first, second, restarted = (
        MemoryService(lambda: root, 10_000, CursorCodec.shared(lambda: file_key(cache)))
        for _ in range(3)
    )
    everything = _refs(_list(first))
    payload = _list(first, page_size=2)
    seen = _refs(payload)
    turn = 0
    while (cursor := payload["page"]["next_cursor"]) is not None:
        turn += 1
        payload = _list((second, restarted, first)[turn % 3], cursor=cursor)
        seen += _refs(payload)
    assert seen == everything
    # A codec of another key (another cache directory) still finds them stale.
    elsewhere = MemoryService(
        lambda: root, 10_000, CursorCodec.shared(lambda: file_key(tmp_path / "other"))
    )
    assert _error(elsewhere, cursor=_first_cursor(first)) == STALE


def test_cursor_is_stale_after_any_selected_change(
    service: MemoryService, inventory: dict[str, dict[str, Any]], write: Writer, v2: Factory,
    root: Path,
) -> None:  # fmt: skip
    cursor = _first_cursor(service)
    write(v2(namespace="alpha"))
    assert _error(service, cursor=cursor) == STALE
    cursor = _first_cursor(service)
    body = dict(inventory["b_loose"], content="rewritten by hand")
    write(body)
    assert _error(service, cursor=cursor) == STALE
    cursor = _first_cursor(service)
    (root / "project" / "solo.json").unlink()
    assert _error(service, cursor=cursor) == STALE


def test_changes_outside_the_selection_keep_the_cursor(
    service: MemoryService, inventory: dict[str, dict[str, Any]], write: Writer, v2: Factory
) -> None:
    cursor = _first_cursor(service, namespace_id="alpha")
    write(v2(namespace="beta"))
    assert _refs(_list(service, namespace_id="alpha", cursor=cursor))


def test_tampered_and_malformed_cursors_are_invalid(
    service: MemoryService, inventory: dict[str, dict[str, Any]]
) -> None:
    cursor = _first_cursor(service)
    payload, signature = cursor.split(".")
    flipped = signature[:-2] + ("A" if signature[-2] != "A" else "B") + signature[-1]
    assert _error(service, cursor=payload + "." + flipped) == INVALID
    body = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    body["o"] = 4
    forged = base64.urlsafe_b64encode(
        json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    ).rstrip(b"=")
    assert _error(service, cursor=forged.decode() + "." + signature) == INVALID
    for bad in ("x", "a.b.c", payload, "." + signature, "%%%.###", "a" * 4097):
        assert _error(service, cursor=bad) == INVALID


def test_cursor_for_a_different_selector_is_invalid(
    service: MemoryService, inventory: dict[str, dict[str, Any]]
) -> None:
    cursor = _first_cursor(service, namespace_id="alpha")
    assert _error(service, cursor=cursor) == INVALID
    assert _error(service, namespace_id="alpha", collection_id=None, cursor=cursor) == INVALID
    assert _list(service, namespace_id="alpha", cursor=cursor)["page"]["number"] == 2


def test_page_size_with_cursor_is_invalid(
    service: MemoryService, inventory: dict[str, dict[str, Any]]
) -> None:
    cursor = _first_cursor(service)
    assert _error(service, cursor=cursor, page_size=2) == INVALID


def test_offset_beyond_total_is_invalid(
    service: MemoryService, codec: CursorCodec, inventory: dict[str, dict[str, Any]]
) -> None:
    state = codec.decode(_first_cursor(service))
    beyond = codec.encode(replace(state, offset=10))
    assert _error(service, cursor=beyond) == INVALID


def test_codec_round_trip_and_domain_separation(codec: CursorCodec) -> None:
    state = CursorState("a" * 64, "b" * 64, 4, 2)
    assert codec.decode(codec.encode(state)) == state
    assert codec.selector_digest("project", None, "all", None) != codec.snapshot_digest(0, 0)
    # The listing state signs count and checksum both.
    assert codec.snapshot_digest(1, 0) != codec.snapshot_digest(0, 0)
    assert codec.snapshot_digest(1, 5) != codec.snapshot_digest(1, 6)
    assert codec.snapshot_digest(1, 5) != CursorCodec.generate().snapshot_digest(1, 5)
    with pytest.raises(ValueError, match="32 bytes"):
        CursorCodec(b"short", "0" * 32)
    assert "key" not in repr(codec) or "process key" in repr(codec)


@pytest.mark.parametrize(
    ("arguments", "code"),
    [
        ({"scope": "nope"}, "invalid_scope"),
        ({"scope": "project", "namespace_id": "Bad"}, "invalid_namespace"),
        ({"scope": "project", "namespace_id": None}, "invalid_namespace"),
        ({"scope": "project", "collection_id": "c"}, "invalid_request"),
        ({"scope": "project", "collection_id": None}, "invalid_request"),
        ({"scope": "project", "namespace_id": "a", "collection_id": "-x"}, "invalid_collection"),
        ({"scope": "project", "namespace_id": "a", "collection_id": 3}, "invalid_collection"),
        ({"scope": "project", "page_size": 0}, "invalid_page_size"),
        ({"scope": "project", "page_size": 101}, "invalid_page_size"),
        ({"scope": "project", "page_size": True}, "invalid_page_size"),
        ({"scope": "project", "page_size": "5"}, "invalid_page_size"),
        ({"scope": "project", "cursor": ""}, "invalid_cursor"),
        ({"scope": "project", "cursor": 5}, "invalid_cursor"),
        ({"scope": "project", "query": "x"}, "invalid_request"),
    ],
)
def test_invalid_list_arguments(
    service: MemoryService, arguments: dict[str, Any], code: str
) -> None:
    outcome = service.list(arguments)
    assert outcome.is_error
    assert (outcome.payload["status"], outcome.payload["code"]) == ("invalid_request", code)


def test_list_storage_errors(root: Path, codec: CursorCodec, write: Writer, v1: Factory) -> None:
    for number in range(3):
        write(v1(memory_id=f"n{number}"), f"project/{number}.json")
    payload = MemoryService(lambda: root, 2, codec).list({"scope": "project"}).payload
    assert (payload["status"], payload["code"]) == ("storage_error", "candidate_limit_exceeded")
    (root / "agent").write_text("not a directory")
    payload = MemoryService(lambda: root, 2, codec).list({"scope": "agent"}).payload
    assert (payload["status"], payload["code"]) == ("storage_error", "memory_source_unavailable")


def test_one_level_selectors_ignore_deeper_files(
    service: MemoryService, write: Writer, v1: Factory, v2: Factory
) -> None:
    loose = v2(namespace="alpha")
    write(loose)
    write(v1(), "project/alpha/sub/dir/legacy.json")
    assert _refs(_list(service, namespace_id="alpha", collection_id=None)) == [loose["id"]]


@pytest.mark.parametrize(("size", "pages"), [(5.0, 5), (1e2, 100), (2, 2)])
def test_a_whole_number_written_as_a_float_is_an_integer_page_size(
    service: MemoryService, write: Writer, v1: Factory, size: float, pages: int
) -> None:
    for number in range(3):
        write(v1(memory_id=f"n{number}"), f"project/{number}.json")
    payload = _list(service, page_size=size)
    assert payload["page"]["total_pages"] == -(-3 // pages)
    assert payload["page"]["count"] == min(3, pages)


PAGE_SIZE_SCHEMA = tool_definition("memory_list")["inputSchema"]["properties"]["page_size"]


@given(
    st.integers(-5, 200)
    | st.floats(-5, 200, allow_nan=False)
    | st.integers(-5, 200).map(float)
    | st.booleans()
)
def test_the_handler_takes_every_page_size_the_schema_takes(value: object) -> None:
    # The host validates against the published schema before the handler runs; the
    # handler must not refuse, as the wrong type, a value that schema calls an integer.
    service = MemoryService(lambda: Path("/nonexistent/memory"), 10, CursorCodec.generate())
    accepted = jsonschema_rs.Draft202012Validator(PAGE_SIZE_SCHEMA).is_valid(value)
    outcome = service.list({"scope": "project", "page_size": value})
    assert (outcome.payload.get("code") != "invalid_page_size") == accepted, outcome.payload
