"""Exact inspection of v1 and v2 references."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mymcp.plugins.mnemosyne.memory import CursorCodec, MemoryService
from mymcp.plugins.mnemosyne.memory import index as index_module

Factory = Callable[..., dict[str, Any]]
Writer = Callable[..., Path]


def _v2_ref(body: dict[str, Any]) -> dict[str, Any]:
    return {
        "schema_version": 2,
        "scope": body["scope"],
        "namespace_id": body["namespace"]["id"],
        "collection_id": None if body["collection"] is None else body["collection"]["id"],
        "id": body["id"],
    }


def test_v2_inspection_returns_the_full_record(
    service: MemoryService, write: Writer, v2: Factory
) -> None:
    body = v2(collection="c", kind="event", occurred_at="2026-01-01T00:00:00Z", state="archived")
    write(body)
    outcome = service.inspect({"reference": _v2_ref(body)})
    assert not outcome.is_error
    assert outcome.payload == {"status": "ok", "memory": {"reference": _v2_ref(body), **body}}


def test_v2_inspection_is_a_lookup_not_a_scan(
    service: MemoryService, write: Writer, v2: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = v2()
    write(body)

    def no_scan(*_: Any, **__: Any) -> Any:
        raise AssertionError("v2 inspection must not list directories")

    monkeypatch.setattr(index_module.MemoryIndex, "refresh", no_scan)
    assert service.inspect({"reference": _v2_ref(body)}).payload["status"] == "ok"


def test_v2_not_found_cases(service: MemoryService, write: Writer, v2: Factory, root: Path) -> None:
    body = v2(collection="c")
    path = write(body)
    for reference in (
        dict(_v2_ref(body), collection_id=None),
        dict(_v2_ref(body), namespace_id="other"),
        dict(_v2_ref(body), scope="knowledge"),
        dict(_v2_ref(body), id="mem_" + "f" * 32),
    ):
        payload = service.inspect({"reference": reference}).payload
        assert (payload["status"], payload["code"]) == ("not_found", "not_found")
    path.write_text("{broken")
    assert service.inspect({"reference": _v2_ref(body)}).payload["code"] == "not_found"
    path.unlink()
    path.symlink_to(root)
    assert service.inspect({"reference": _v2_ref(body)}).payload["code"] == "not_found"


def test_v1_inspection_and_ambiguity(service: MemoryService, write: Writer, v1: Factory) -> None:
    write(v1(memory_id="solo", title="T", tags=["x"]), "preference/solo.json")
    payload = service.inspect(
        {"reference": {"schema_version": 1, "scope": "preference", "id": "solo"}}
    ).payload
    assert payload == {
        "status": "ok",
        "memory": {
            "reference": {"schema_version": 1, "scope": "preference", "id": "solo"},
            "schema_version": 1,
            "id": "solo",
            "title": "T",
            "content": "Legacy content.",
            "tags": ["x"],
        },
    }
    write(v1(memory_id="twice"), "preference/a/one.json")
    write(v1(memory_id="twice"), "preference/b/two.json")
    outcome = service.inspect(
        {"reference": {"schema_version": 1, "scope": "preference", "id": "twice"}}
    )
    assert outcome.is_error
    assert (outcome.payload["status"], outcome.payload["code"]) == (
        "conflict",
        "ambiguous_reference",
    )
    missing = service.inspect({"reference": {"schema_version": 1, "scope": "self", "id": "solo"}})
    assert missing.payload["code"] == "not_found"


def test_v1_inspection_respects_the_candidate_limit(
    root: Path, codec: CursorCodec, write: Writer, v1: Factory
) -> None:
    for number in range(3):
        write(v1(memory_id=f"n{number}"), f"self/{number}.json")
    service = MemoryService(lambda: root, 2, codec)
    payload = service.inspect({"reference": {"schema_version": 1, "scope": "self", "id": "n1"}})
    assert (payload.payload["status"], payload.payload["code"]) == (
        "storage_error",
        "candidate_limit_exceeded",
    )


@pytest.mark.parametrize(
    "arguments",
    [
        {},
        {"reference": None},
        {"reference": {"schema_version": 1, "scope": "self", "id": "bad id"}},
        {"reference": {"schema_version": 1, "scope": "self", "id": "x", "extra": 1}},
        {"reference": {"schema_version": True, "scope": "self", "id": "x"}},
        {"reference": {"schema_version": 3, "scope": "self", "id": "x"}},
        {"reference": {"schema_version": 2, "scope": "self", "id": "mem_" + "a" * 32}},
        {
            "reference": {
                "schema_version": 2,
                "scope": "self",
                "namespace_id": "n",
                "collection_id": "..",
                "id": "mem_" + "a" * 32,
            }
        },
        {
            "reference": {
                "schema_version": 2,
                "scope": "elsewhere",
                "namespace_id": "n",
                "collection_id": None,
                "id": "mem_" + "a" * 32,
            }
        },
    ],
)
def test_invalid_references(service: MemoryService, arguments: dict[str, Any]) -> None:
    outcome = service.inspect(arguments)
    assert outcome.is_error
    assert (outcome.payload["status"], outcome.payload["code"]) == (
        "invalid_request",
        "invalid_reference",
    )
    # The field is the reference or the member of it at fault.
    assert outcome.payload["field"].split(".")[0] == "reference"
    assert outcome.payload["reason"]


def test_an_unknown_argument_is_not_blamed_on_the_reference(service: MemoryService) -> None:
    reference = {"schema_version": 1, "scope": "self", "id": "x"}
    payload = service.inspect({"reference": reference, "path": "/"}).payload
    assert (payload["code"], payload["field"], payload["reason"]) == (
        "invalid_request",
        "path",
        "unexpected",
    )


@pytest.mark.parametrize(
    ("reference", "field", "reason"),
    [
        (
            {"schema_version": 2, "scope": "self", "id": "mem_" + "a" * 32},
            "namespace_id",
            "missing",
        ),
        ({"schema_version": 1, "scope": "self", "id": "bad id"}, "id", "malformed"),
        ({"schema_version": 3, "scope": "self", "id": "x"}, "schema_version", "not_allowed"),
        ({"schema_version": 1, "scope": "elsewhere", "id": "x"}, "scope", "not_allowed"),
    ],
)
def test_reference_errors_name_the_member(
    service: MemoryService, reference: dict[str, Any], field: str, reason: str
) -> None:
    payload = service.inspect({"reference": reference}).payload
    assert (payload["field"], payload["reason"]) == (f"reference.{field}", reason)
    assert payload["message"].startswith(f"reference.{field} ")
