"""Service-wide guarantees: lazy roots, no root creation, content-free logs, error shape."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mymcp.plugins.mnemosyne.memory import (
    CursorCodec,
    ErrorCode,
    ErrorStatus,
    MemoryService,
    error_payload,
)
from mymcp.plugins.mnemosyne.memory import index as index_module
from mymcp.plugins.mnemosyne.memory import reads as reads_module

Factory = Callable[..., dict[str, Any]]
Writer = Callable[..., Path]
MARKER = "zqxmarker"


def _all_operations(service: MemoryService) -> list[Any]:
    return [
        service.recall({"query": "anything", "scope": "project"}),
        service.recall({"query": "anything", "scope": "project", "namespace_id": "ns"}),
        service.list({"scope": "project"}),
        service.list({"scope": "project", "namespace_id": "ns", "collection_id": None}),
        service.list({"scope": "project", "namespace_id": "ns", "collection_id": "c"}),
        service.inspect({"reference": {"schema_version": 1, "scope": "self", "id": "x"}}),
        service.inspect(
            {
                "reference": {
                    "schema_version": 2,
                    "scope": "self",
                    "namespace_id": "ns",
                    "collection_id": "c",
                    "id": "mem_" + "a" * 32,
                }
            }
        ),
    ]


def test_no_read_operation_creates_a_missing_root(tmp_path: Path, codec: CursorCodec) -> None:
    root = tmp_path / "home" / ".mnemosyne" / "memory"
    service = MemoryService(lambda: root, 10_000, codec)
    outcomes = _all_operations(service)
    assert [o.is_error for o in outcomes] == [False] * 5 + [True, True]
    assert {o.payload.get("code") for o in outcomes[5:]} == {"not_found"}
    assert list(tmp_path.iterdir()) == []


def test_root_is_resolved_lazily_on_every_call(
    tmp_path: Path, codec: CursorCodec, write: Writer, v1: Factory, root: Path
) -> None:
    calls: list[Path] = []
    current = {"root": tmp_path / "missing"}

    def resolver() -> Path:
        calls.append(current["root"])
        return current["root"]

    service = MemoryService(resolver, 10_000, codec)
    assert calls == []
    assert service.list({"scope": "project"}).payload["page"]["total_count"] == 0
    write(v1(), "project/x.json")
    current["root"] = root
    assert service.list({"scope": "project"}).payload["page"]["total_count"] == 1
    assert len(calls) == 2


@pytest.mark.parametrize("where", ["root", "above it"])
def test_a_root_reached_through_a_link_to_nothing_is_unavailable_not_empty(
    tmp_path: Path, codec: CursorCodec, where: str
) -> None:
    # Its memories are somewhere (a volume not mounted, a moved directory): "none" would
    # pass an empty recall or listing for the truth. A root simply absent holds none.
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "unmounted")
    root = link if where == "root" else link / "memory"
    service = MemoryService(lambda: root, 10_000, codec)
    listed = service.list({"scope": "project"}).payload
    assert listed == error_payload(ErrorCode.MEMORY_SOURCE_UNAVAILABLE)
    recalled = service.recall({"query": "database", "scope": "project"}).payload
    assert (recalled["status"], recalled["code"]) == (
        "retrieval_error",
        "memory_source_unavailable",
    )
    (tmp_path / "unmounted").mkdir()  # mounted again: an empty root, read as such
    assert service.list({"scope": "project"}).payload["page"]["total_count"] == 0


def test_resolver_failure_is_an_unavailable_source(codec: CursorCodec) -> None:
    def broken() -> Path:
        raise RuntimeError(f"/secret/{MARKER}")

    service = MemoryService(broken, 10_000, codec)
    payload = service.list({"scope": "self"}).payload
    assert payload == error_payload(ErrorCode.MEMORY_SOURCE_UNAVAILABLE)
    assert payload["status"] == "storage_error"
    assert service.recall({"query": "q", "scope": "self"}).payload["status"] == "retrieval_error"


def test_unexpected_failures_become_internal_errors(
    service: MemoryService, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def explode(*_: Any, **__: Any) -> Any:
        raise ValueError(MARKER)

    monkeypatch.setattr(index_module.MemoryIndex, "recall", explode)
    caplog.set_level(logging.DEBUG)
    outcome = service.recall({"query": "q", "scope": "self"})
    assert outcome.is_error
    failure_id = outcome.payload.pop("request_id")
    assert outcome.payload == {
        "status": "internal_error",
        "code": "internal_error",
        "message": ErrorCode.INTERNAL_ERROR.message,
    }
    # The operator finds the failure by the id the caller got: its type and the line of
    # MyMCP's code it came out of (the service's call into the index), never its text.
    [line] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert line.name == "mcp.memory_recall"
    assert line.getMessage() == (
        f"tool_failure request_id={failure_id} tool=memory_recall error_type=ValueError "
        f"at=reads.py:{_line_calling(reads_module.MemoryService._recall, 'index.recall(')}"
    )
    assert MARKER not in caplog.text
    assert all(record.exc_info is None for record in caplog.records)
    again = service.recall({"query": "q", "scope": "self"}).payload["request_id"]
    assert again != failure_id  # one id per failure


def _line_calling(function: Any, call: str) -> int:
    """The line number of the first line of ``function`` that holds ``call``."""
    lines, first = inspect.getsourcelines(function)
    return first + next(i for i, line in enumerate(lines) if call in line and "def " not in line)


def test_candidate_limit_is_validated(codec: CursorCodec, root: Path) -> None:
    for bad in (0, 1_000_001, True, 5.0):
        with pytest.raises(ValueError, match="candidate_limit"):
            MemoryService(lambda: root, bad, codec)  # type: ignore[arg-type]


def test_logs_carry_no_content(
    service: MemoryService,
    write: Writer,
    v1: Factory,
    v2: Factory,
    caplog: pytest.LogCaptureFixture,
    root: Path,
) -> None:
    body = v2(
        namespace=MARKER,
        collection=MARKER + "c",
        title=f"title {MARKER}",
        content=f"content {MARKER}",
        tags=[MARKER],
    )
    body["namespace"]["label"] = MARKER
    write(body)
    write(v1(memory_id=MARKER, content=MARKER), f"project/{MARKER}/x.json")
    write(f'{{"content": "{MARKER}"', f"project/{MARKER}/broken.json")
    (root / "project" / f"{MARKER}.json").symlink_to(root / "project" / MARKER / "x.json")
    caplog.set_level(logging.DEBUG)
    reference = {
        "schema_version": 2,
        "scope": "project",
        "namespace_id": MARKER,
        "collection_id": MARKER + "c",
        "id": body["id"],
    }
    outcomes = [
        service.recall({"query": MARKER, "scope": "project", "tags": [MARKER]}),
        service.recall({"query": MARKER, "scope": "project", "namespace_id": MARKER}),
        service.recall({"query": MARKER, "scope": MARKER}),
        service.list({"scope": "project", "page_size": 1}),
        service.list({"scope": "project", "namespace_id": MARKER, "collection_id": MARKER + "c"}),
        service.list({"scope": "project", "cursor": MARKER}),
        service.inspect({"reference": reference}),
        service.inspect({"reference": {"schema_version": 1, "scope": "project", "id": MARKER}}),
        service.inspect({"reference": MARKER}),
    ]
    assert MARKER in str(outcomes[0].payload)  # the marker really was retrievable
    assert caplog.records
    assert MARKER not in caplog.text
    assert str(root) not in caplog.text
    terminal = [r.getMessage() for r in caplog.records if r.name.startswith("mcp.memory_")]
    assert len(terminal) == len(outcomes)
    assert terminal[0].startswith("event=memory_recall outcome=ok scope=project")
    assert "event=memory_recall outcome=invalid_request code=invalid_scope" in terminal[2]
    assert {r.name for r in caplog.records} <= {
        "mcp.memory_recall",
        "mcp.memory_list",
        "mcp.memory_inspect",
        "mymcp.memory.store",
    }


def test_every_code_has_a_status_and_a_fixed_message() -> None:
    for code in ErrorCode:
        assert isinstance(code.status(), ErrorStatus)
        assert code.message
        assert "{" not in code.message
    assert ErrorCode.CANDIDATE_LIMIT_EXCEEDED.status() is ErrorStatus.STORAGE_ERROR
    assert ErrorCode.CANDIDATE_LIMIT_EXCEEDED.status(retrieval=True) is ErrorStatus.RETRIEVAL_ERROR
    assert ErrorCode.NOT_FOUND.status(retrieval=True) is ErrorStatus.NOT_FOUND
    assert ErrorCode.STALE_CURSOR.status() is ErrorStatus.CONFLICT
    assert ErrorCode.REPLACEMENT_OUTCOME_UNCERTAIN.status() is ErrorStatus.UNCERTAIN
    assert error_payload(ErrorCode.DISALLOWED_CONTENT, field="content", reason="x") == {
        "status": "refused",
        "code": "disallowed_content",
        "field": "content",
        "reason": "x",
        "message": ErrorCode.DISALLOWED_CONTENT.message,
    }
